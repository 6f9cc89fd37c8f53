// Streams, events and their workers (stream.h), the vector clocks of the hazard check, the
// launch log, and enqueue() for the library fakes.
//
// Note [Legacy default stream]
// The handle nullptr is the current device's legacy default stream. As in CUDA, work queued
// on it waits for all earlier work of the device's blocking streams (those created without
// cudaStreamNonBlocking), and work queued on a blocking stream waits for earlier work of
// the legacy stream; non-blocking streams are independent of it. The waits are queued as
// operations, so they order both the execution and the clocks.
#include "cuda_emu/stream.h"

#include <chrono>
#include <memory>
#include <cstdio>
#include <unordered_set>
#include <unordered_map>

#include "cuda_emu/graph.h"
#include "cuda_emu/perf.h"

namespace rt::emu {
namespace {

// Clocks, sequence numbers and the stream/event registries.
std::mutex g_clock_mu;
Clock& host_clock() {
  static auto* c = new Clock;
  return *c;
}
std::vector<CUstream_st*>& streams_by_uid() {  // index: uid
  static auto* v = new std::vector<CUstream_st*>{nullptr};
  return *v;
}
std::unordered_set<CUstream_st*>& live_streams() {
  static auto* s = new std::unordered_set<CUstream_st*>;
  return *s;
}
// Owned here and by the queued records of them: destroying an event with a record still
// queued is allowed (CUDA frees it once the record has run), so the record holds it too.
std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>>& live_events() {
  static auto* s = new std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>>;
  return *s;
}

std::mutex g_sink_mu;
std::shared_ptr<std::function<void(const Activity&)>> g_sink;
std::atomic<uint64_t> g_correlation{0};
thread_local std::vector<uint64_t> tls_external_ids;
thread_local Op* tls_op = nullptr;

void run_op(Op& op) {
  if (sticky_error(op.device) != cudaSuccess) {  // Note [Sticky faults]
    op.skipped = true;
    return;
  }
  switch (op.kind) {
    case Op::Kind::kernel:
      run_kernel(op);
      break;
    case Op::Kind::copy:
    case Op::Kind::memset:
    case Op::Kind::library:
      check_uses(op);
      op.fn();
      mark_uses(op);
      break;
    case Op::Kind::record:
    case Op::Kind::host:
      op.fn();
      break;
    case Op::Kind::wait:
      break;  // waited for before (worker_loop)
  }
}

void log_activity(const Op& op, uint64_t start, uint64_t end) {
  std::shared_ptr<std::function<void(const Activity&)>> sink;
  {
    std::lock_guard<std::mutex> g(g_sink_mu);
    sink = g_sink;
  }
  if (!sink || op.skipped) return;  // work that never ran leaves no record
  Activity a;
  switch (op.kind) {
    case Op::Kind::kernel: a.kind = Activity::Kind::kernel; break;
    case Op::Kind::copy: a.kind = Activity::Kind::memcpy; break;
    case Op::Kind::memset: a.kind = Activity::Kind::memset; break;
    case Op::Kind::library: a.kind = Activity::Kind::library; break;
    default: return;
  }
  a.name = op.name;
  a.start_ns = start;
  a.end_ns = end;
  a.device = op.device;
  a.stream = op.stream_uid;
  a.correlation_id = op.correlation_id;
  a.external_ids = op.external_ids;
  if (op.kernel) {
    a.grid = op.kernel->grid;
    a.block = op.kernel->block;
    a.shared_bytes = op.kernel->dynamic_smem;
  }
  a.bytes = op.bytes;
  a.copy_kind = op.copy_kind;
  (*sink)(a);
}

void worker_loop(CUstream_st* s) {
  for (;;) {
    std::unique_ptr<Op> op;
    {
      std::unique_lock<std::mutex> lk(s->mu);
      s->work_cv.wait(lk, [&] { return s->stopping || !s->queue.empty(); });
      if (s->queue.empty()) return;  // stopping and drained
      op = std::move(s->queue.front());
      s->queue.pop_front();
    }
    if (op->kind == Op::Kind::wait) op->ready();
    tls_op = op.get();
    const uint64_t start = now_ns();
    try {
      run_op(*op);
      perf_op_done(*op);
    } catch (const OpFault& f) {
      set_sticky(op->device, f.code, f.report);
    }
    const uint64_t end = now_ns();
    tls_op = nullptr;
    log_activity(*op, start, end);
    const uint64_t seq = op->seq;
    op.reset();  // the work's captures (buffers, plans) go before completion is seen
    {
      std::lock_guard<std::mutex> lk(s->mu);
      s->completed.store(seq, std::memory_order_release);
    }
    s->done_cv.notify_all();
  }
}

void wait_completed(CUstream_st* s, uint64_t seq) {
  if (s->completed.load(std::memory_order_acquire) >= seq) return;
  std::unique_lock<std::mutex> lk(s->mu);
  s->done_cv.wait(lk, [&] { return s->completed.load(std::memory_order_acquire) >= seq; });
}

CUstream_st* new_stream(int device, bool legacy, bool blocking, int priority, bool graph_lane = false) {
  auto* s = new CUstream_st;
  s->device = device;
  s->legacy = legacy;
  s->graph_lane = graph_lane;
  s->blocking = blocking;
  s->priority = priority;
  {
    std::lock_guard<std::mutex> g(g_clock_mu);
    auto& v = streams_by_uid();
    if (v.size() >= 0xFFFF) {
      delete s;
      return nullptr;
    }
    s->uid = uint32_t(v.size());
    v.push_back(s);
    live_streams().insert(s);
  }
  s->worker = std::thread(worker_loop, s);
  return s;
}

CUstream_st* legacy_stream(int device) {
  static auto* legacy = new std::vector<std::atomic<CUstream_st*>>(size_t(heap().ndev));
  static std::mutex mu;
  auto& slot = (*legacy)[size_t(device)];
  if (CUstream_st* s = slot.load(std::memory_order_acquire)) return s;
  std::lock_guard<std::mutex> g(mu);
  if (!slot.load()) slot.store(new_stream(device, true, false, 0), std::memory_order_release);
  return slot.load();
}

std::unique_ptr<Op> wait_op(CUstream_st* on, uint64_t seq) {
  auto w = std::make_unique<Op>();
  w->kind = Op::Kind::wait;
  w->name = "wait";
  w->ready = [on, seq] {
    wait_completed(on, seq);
    return true;
  };
  return w;
}

// Under g_clock_mu: numbers `op`, gives it the stream's clock, and queues it.
void push_locked(CUstream_st* s, std::unique_ptr<Op> op) {
  s->clock.join(host_clock());
  op->device = s->device;
  op->stream_uid = s->uid;
  op->seq = ++s->enqueued;
  s->clock.set(s->uid, op->seq);
  if (s->recent.empty()) s->recent.resize(4096);
  s->recent[op->seq % s->recent.size()] = op->name;
  op->clock = s->clock;
  std::lock_guard<std::mutex> lk(s->mu);
  s->queue.push_back(std::move(op));
  s->work_cv.notify_one();
}

// The implicit waits before work on `s` (Note [Legacy default stream]).
void legacy_waits_locked(CUstream_st* s) {
  auto wait_for = [&](CUstream_st* other) {
    if (other == s || other->device != s->device || other->enqueued == 0) return;
    if (other->completed.load() >= other->enqueued) {
      s->clock.join(other->clock);
      return;
    }
    s->clock.join(other->clock);
    push_locked(s, wait_op(other, other->enqueued));
  };
  if (s->legacy) {
    for (CUstream_st* o : live_streams())
      if (o->blocking) wait_for(o);
  } else if (s->blocking) {
    wait_for(legacy_stream(s->device));
  }
}

}  // namespace

// ---- clocks --------------------------------------------------------------------------------
void Clock::set(uint32_t uid, uint64_t s) {
  if (seq.size() <= uid) seq.resize(uid + 1, 0);
  seq[uid] = s;
}
void Clock::join(const Clock& o) {
  if (seq.size() < o.seq.size()) seq.resize(o.seq.size(), 0);
  for (size_t i = 0; i < o.seq.size(); ++i) seq[i] = std::max(seq[i], o.seq[i]);
}

std::string stream_name(uint32_t uid) {
  std::lock_guard<std::mutex> g(g_clock_mu);
  const auto& v = streams_by_uid();
  if (uid == 0 || uid >= v.size()) return "an unknown stream";
  const CUstream_st* s = v[uid];
  char buf[96];
  if (s->legacy)
    std::snprintf(buf, sizeof buf, "the legacy default stream of cuda:%d", s->device);
  else if (s->graph_lane)
    std::snprintf(buf, sizeof buf, "graph lane stream %p of cuda:%d", static_cast<const void*>(s), s->device);
  else
    std::snprintf(buf, sizeof buf, "stream %p of cuda:%d", static_cast<const void*>(s), s->device);
  return buf;
}

std::string op_name(uint64_t packed) {
  const uint32_t uid = access_uid(packed);
  const uint64_t seq = access_seq(packed);
  std::string name;
  {
    std::lock_guard<std::mutex> g(g_clock_mu);
    const auto& v = streams_by_uid();
    if (uid == 0 || uid >= v.size()) return "an unknown operation";
    const CUstream_st* s = v[uid];
    if (!s->recent.empty() && s->enqueued - seq < s->recent.size()) name = s->recent[seq % s->recent.size()];
  }
  return (name.empty() ? std::string("operation") : "'" + name + "'") + " #" + std::to_string(seq) + " on " +
         stream_name(uid);
}

// ---- streams ---------------------------------------------------------------------------------
CUstream_st* resolve(cudaStream_t s) {
  note_context();  // every call that names a stream needs the thread's context
  return resolve_on(s, current_device());
}

CUstream_st* resolve_on(cudaStream_t s, int device) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
    return check_device(device) == cudaSuccess ? legacy_stream(device) : nullptr;
  std::lock_guard<std::mutex> g(g_clock_mu);
  return live_streams().count(s) ? s : nullptr;
}

CUstream_st* create_stream(int device, bool blocking, int priority) {
  return new_stream(device, false, blocking, priority);
}

CUstream_st* create_lane_stream(int device) { return new_stream(device, false, false, 0, true); }

cudaError_t destroy_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return cudaErrorInvalidResourceHandle;
  {
    std::lock_guard<std::mutex> g(g_clock_mu);
    if (!live_streams().erase(s)) return cudaErrorInvalidResourceHandle;
  }
  // As in CUDA, queued work still completes; the stream's record stays for events and
  // reports (streams_by_uid), its worker ends once the queue is drained.
  {
    std::lock_guard<std::mutex> lk(s->mu);
    s->stopping = true;
  }
  s->work_cv.notify_one();
  s->worker.detach();
  return cudaSuccess;
}

// ---- events ----------------------------------------------------------------------------------
bool is_live_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> g(g_clock_mu);
  return live_events().count(e) != 0;
}

CUevent_st* create_event(int device, unsigned flags) {
  auto e = std::make_shared<CUevent_st>();
  e->device = device;
  e->flags = flags;
  std::lock_guard<std::mutex> g(g_clock_mu);
  live_events().emplace(e.get(), e);
  return e.get();
}

cudaError_t destroy_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> g(g_clock_mu);
  if (!live_events().erase(e)) return cudaErrorInvalidResourceHandle;
  return cudaSuccess;  // freed here, or by the last queued record of it
}

cudaError_t record_event(CUevent_st* e, CUstream_st* s) {
  if (const cudaError_t st = sticky_error(s->device)) return st;
  if (e->device != s->device) return cudaErrorInvalidResourceHandle;
  bool captured = false;
  if (const cudaError_t st = capture_record(e, s, &captured)) return st;
  if (captured) {  // no uncaptured record is left to wait for (Note [Stream capture] in cuda_emu/capture.cc)
    std::lock_guard<std::mutex> g(g_clock_mu);
    e->stream = nullptr;
    ++e->generation;
    return cudaSuccess;
  }
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::record;
  op->name = "event record";
  std::lock_guard<std::mutex> g(g_clock_mu);
  const auto owner = live_events().find(e);
  if (owner == live_events().end()) return cudaErrorInvalidResourceHandle;
  const uint64_t gen = ++e->generation;
  op->fn = [e = owner->second, gen] {
    if (e->generation == gen) e->time_ns.store(now_ns(), std::memory_order_release);
  };
  legacy_waits_locked(s);
  CUstream_st* target = s;
  push_locked(target, std::move(op));
  e->stream = s;
  e->seq = s->enqueued;
  e->clock = s->clock;
  return cudaSuccess;
}

cudaError_t wait_event(CUstream_st* s, CUevent_st* e) {
  if (const cudaError_t st = sticky_error(s->device)) return st;
  bool captured = false;
  if (const cudaError_t st = capture_wait(s, e, event_recorded(e), &captured)) return st;
  if (captured) return cudaSuccess;
  std::lock_guard<std::mutex> g(g_clock_mu);
  if (!e->stream) return cudaSuccess;  // never recorded: nothing to wait for
  s->clock.join(e->clock);
  push_locked(s, wait_op(e->stream, e->seq));
  return cudaSuccess;
}

namespace {
// Fills in what the queueing adds to an op's own fields: its CUPTI ids, whether the lab records it.
void stamp(Op& op) {
  op.correlation_id = ++g_correlation;
  op.external_ids = tls_external_ids;
  // Decided when queued, as the host's window is (Note [Kernel lab] in perf.cc).
  op.perf = op.kind != Op::Kind::record && op.kind != Op::Kind::wait && op.kind != Op::Kind::host && perf_recording();
}

// Queues `op` on `s`; its sequence number on `s` goes to *seq (0 when it was captured).
cudaError_t submit_seq(CUstream_st* s, std::unique_ptr<Op> op, uint64_t* seq) {
  if (const cudaError_t st = sticky_error(s->device)) return st;
  bool captured = false;
  if (const cudaError_t st = capture_op(s, op, &captured)) return st;
  if (captured) {
    *seq = 0;
    return cudaSuccess;
  }
  if (op->issue) op->fn = op->issue();
  stamp(*op);
  std::lock_guard<std::mutex> g(g_clock_mu);
  legacy_waits_locked(s);
  push_locked(s, std::move(op));
  *seq = s->enqueued;
  return cudaSuccess;
}
}  // namespace

cudaError_t submit(CUstream_st* s, std::unique_ptr<Op> op) {
  uint64_t seq = 0;
  return submit_seq(s, std::move(op), &seq);
}

cudaError_t submit_and_wait(CUstream_st* s, std::unique_ptr<Op> op, bool host_learns) {
  // The op's own number, taken under g_clock_mu: another host thread may queue on `s` meanwhile.
  uint64_t seq = 0;
  if (const cudaError_t e = submit_seq(s, std::move(op), &seq)) return e;
  if (seq == 0) return cudaErrorStreamCaptureUnsupported;  // callers refuse capturing streams first
  return host_learns ? synchronize_stream(s) : (wait_completed(s, seq), sticky_error(s->device));
}

// ---- host waits ------------------------------------------------------------------------------
cudaError_t synchronize_stream(CUstream_st* s) {
  uint64_t target;
  Clock c;
  {
    std::lock_guard<std::mutex> g(g_clock_mu);
    target = s->enqueued;
    c = s->clock;
  }
  wait_completed(s, target);
  std::lock_guard<std::mutex> g(g_clock_mu);
  host_clock().join(c);
  return sticky_error(s->device);
}

cudaError_t synchronize_device(int device) {
  std::vector<CUstream_st*> ss;
  {
    std::lock_guard<std::mutex> g(g_clock_mu);
    for (CUstream_st* s : live_streams())
      if (s->device == device) ss.push_back(s);
  }
  ss.push_back(legacy_stream(device));
  for (CUstream_st* s : ss) synchronize_stream(s);
  return sticky_error(device);
}

cudaError_t synchronize_event(CUevent_st* e) {
  CUstream_st* s;
  uint64_t seq;
  Clock c;
  {
    std::lock_guard<std::mutex> g(g_clock_mu);
    s = e->stream;
    seq = e->seq;
    c = e->clock;
  }
  if (!s) return cudaSuccess;
  wait_completed(s, seq);
  std::lock_guard<std::mutex> g(g_clock_mu);
  host_clock().join(c);
  return sticky_error(s->device);
}

bool event_done(CUevent_st* e) {
  std::lock_guard<std::mutex> g(g_clock_mu);
  if (!e->stream) return true;
  if (e->stream->completed.load(std::memory_order_acquire) < e->seq) return false;
  host_clock().join(e->clock);  // the host has seen it complete: later work is ordered after it
  return true;
}

bool stream_done(CUstream_st* s) {
  std::lock_guard<std::mutex> g(g_clock_mu);
  if (s->completed.load(std::memory_order_acquire) < s->enqueued) return false;
  host_clock().join(s->clock);
  return true;
}

bool event_recorded(CUevent_st* e) {
  std::lock_guard<std::mutex> g(g_clock_mu);
  return e->stream != nullptr;
}

Op* current_op() { return tls_op; }

// ---- graph launches ----------------------------------------------------------------------------
namespace {
Point point_locked(CUstream_st* s) { return Point{s, s->enqueued, s->clock}; }

// Under g_clock_mu: `s`'s later work waits for `p`, as after cudaStreamWaitEvent.
void join_locked(CUstream_st* s, const Point& p) {
  if (!p.stream || p.stream == s || p.seq == 0 || s->clock.at(p.stream->uid) >= p.seq) return;
  s->clock.join(p.clock);
  push_locked(s, wait_op(p.stream, p.seq));
}
}  // namespace

cudaError_t submit_replay(CUstream_st* s, const std::vector<CUstream_st*>& lanes, std::vector<ReplayStep> steps,
                          Point* last) {
  if (const cudaError_t st = sticky_error(s->device)) return st;
  for (ReplayStep& step : steps) stamp(*step.op);
  std::lock_guard<std::mutex> g(g_clock_mu);
  legacy_waits_locked(s);  // a graph launch is work on `s` (Note [Legacy default stream])
  join_locked(s, *last);   // launches of one exec do not overlap
  const Point start = point_locked(s);
  std::vector<CUstream_st*> on(lanes.size(), nullptr);  // lanes started so far
  std::vector<Point> at(steps.size());
  std::vector<size_t> latest(lanes.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    ReplayStep& step = steps[i];
    CUstream_st* ls = step.lane == 0 ? s : lanes[step.lane];
    if (!on[step.lane]) {
      on[step.lane] = ls;
      join_locked(ls, start);
    }
    // Per other lane, only its latest step that this one depends on: a lane runs in order.
    std::vector<bool> seen(lanes.size(), false);
    for (size_t d : step.after) {
      const uint32_t l = steps[d].lane;
      if (l == step.lane) continue;
      if (!seen[l] || d > latest[l]) latest[l] = d;
      seen[l] = true;
    }
    for (uint32_t l = 0; l < lanes.size(); ++l)
      if (seen[l]) join_locked(ls, at[latest[l]]);
    push_locked(ls, std::move(step.op));
    at[i] = point_locked(ls);
  }
  for (size_t l = 1; l < on.size(); ++l)
    if (on[l]) join_locked(s, point_locked(on[l]));
  *last = point_locked(s);
  return cudaSuccess;
}

// ---- emu.h -----------------------------------------------------------------------------------
namespace {
// `fn`, or else `issue` (Op::issue), is the work.
cudaError_t enqueue_library(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses,
                            std::function<void()> fn, std::function<std::function<void()>()> issue,
                            std::shared_ptr<const LibraryCost> cost) {
  CUstream_st* s = resolve(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::library;
  op->name = name;
  op->uses = std::move(uses);
  op->fn = std::move(fn);
  op->issue = std::move(issue);
  op->library_cost = std::move(cost);
  return submit(s, std::move(op));
}
}  // namespace

cudaError_t enqueue(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses, std::function<void()> fn) {
  return enqueue_library(stream, name, std::move(uses), std::move(fn), nullptr, nullptr);
}

cudaError_t enqueue(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses, std::function<void()> fn,
                    LibraryCost cost) {
  return enqueue_library(stream, name, std::move(uses), std::move(fn), nullptr,
                         std::make_shared<const LibraryCost>(std::move(cost)));
}

cudaError_t enqueue_issued(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses,
                           std::function<std::function<void()>()> issue) {
  return enqueue_library(stream, name, std::move(uses), nullptr, std::move(issue), nullptr);
}

cudaError_t enqueue_issued(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses,
                           std::function<std::function<void()>()> issue, LibraryCost cost) {
  return enqueue_library(stream, name, std::move(uses), nullptr, std::move(issue),
                         std::make_shared<const LibraryCost>(std::move(cost)));
}

int stream_device(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  return s ? s->device : -1;
}

uint32_t stream_id(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  return s ? s->uid : 0;
}

void set_activity_sink(std::function<void(const Activity&)> sink) {
  std::lock_guard<std::mutex> g(g_sink_mu);
  g_sink = sink ? std::make_shared<std::function<void(const Activity&)>>(std::move(sink)) : nullptr;
}

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void push_external_id(uint64_t id) { tls_external_ids.push_back(id); }
bool pop_external_id(uint64_t* id) {
  if (tls_external_ids.empty()) return false;
  if (id) *id = tls_external_ids.back();
  tls_external_ids.pop_back();
  return true;
}

void discard_writes() {
  if (Op* op = current_op()) op->writes_discarded = true;
}

[[noreturn]] void fail(cudaError_t code, const std::string& what) {
  const Op* op = current_op();
  std::string r = "cuda-emu: " + what;
  if (op) r += "\n  in " + op->name + " on " + stream_name(op->stream_uid);
  throw OpFault{code, r};
}

}  // namespace rt::emu
