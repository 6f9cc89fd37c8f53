#include "distributed/reducer.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "distributed/fault.h"
#include "distributed/flight_recorder.h"
#include "engine/stream.h"
#include "kernels/cuda/runtime.h"

namespace rt::dist {

struct Reducer::Slot {
  std::string name;
  Tensor param;
  size_t bucket = 0;
  int64_t offset = 0;  // elements into the bucket
  bool ready = false;  // its gradient is final this step
};

struct Reducer::Bucket {
  Tensor flat;                // (numel,) the gradients of its slots, back to back
  std::vector<size_t> slots;  // reverse registration order
  size_t pending = 0;         // slots not yet ready this step
  bool launched = false;
  Work work;
  Tensor staging;  // (numel,) in opts.reduce_dtype when that differs (Note [Reduce dtype])
};

namespace {

// FNV-1a over a string: a parameter's fingerprint, compared across ranks.
int64_t fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return int64_t(h >> 1);  // non-negative: exact in the int64 tensors exchanged
}

std::string describe(const Reducer::Param& p) {
  return p.first + " " + dtype_name(p.second.dtype()) + shape_str(p.second.shape());
}

// Every rank's `mine` (the same count on each), gathered in rank order.
std::vector<int64_t> gather(Communicator& comm, const std::vector<int64_t>& mine, Millis timeout) {
  const int64_t n = int64_t(mine.size());
  Tensor in = Tensor::from_vector(mine, {n}).to(comm.device());
  Tensor out = Tensor::empty({n * comm.world_size()}, DType::i64, comm.device());
  comm.all_gather(out, in, timeout).wait();
  return out.to_vector<int64_t>();
}

// Note [Same model on every rank]
// A rank with another model (another --model, --num-classes or model flag) would all-reduce
// mismatched buckets into garbage or hang; the parameter lists are compared before the
// first step, count first, then one fingerprint each.
void check_same_params(Communicator& comm, const std::vector<Reducer::Param>& params, Millis timeout) {
  const int W = comm.world_size();
  if (W == 1) return;
  const std::vector<int64_t> counts = gather(comm, {int64_t(params.size())}, timeout);
  for (int r = 0; r < W; ++r)
    RT_CHECK(counts[size_t(r)] == counts[0], "data parallel: rank ", r, " has ", counts[size_t(r)],
             " parameters, rank 0 has ", counts[0],
             ": every rank must build the same model (the same model, number of classes and model options)");
  std::vector<int64_t> mine;
  for (const auto& p : params) mine.push_back(fingerprint(describe(p)));
  const std::vector<int64_t> all = gather(comm, mine, timeout);
  for (int r = 1; r < W; ++r)
    for (size_t i = 0; i < params.size(); ++i)
      RT_CHECK(all[size_t(r) * params.size() + i] == all[i], "data parallel: parameter ", i,
               " differs between rank 0 and rank ", r,
               comm.rank() == 0 || comm.rank() == r ? " (here: " + describe(params[i]) + ")" : std::string(),
               ": every rank must build the same model (the same model, number of classes and model options)");
}

}  // namespace

Reducer::Reducer(Communicator& comm, std::vector<Param> params, ReducerOptions opts)
    : Reducer(comm, std::move(params), opts, {}, {}) {}

Reducer::Reducer(Communicator& comm, std::vector<Param> params, ReducerOptions opts, std::vector<Tensor> producers,
                 std::function<void(size_t k)> deliver)
    : comm_(comm), opts_(opts), deliver_(std::move(deliver)) {
  RT_CHECK(producers.empty() || (producers.size() == params.size() && deliver_), "Reducer: ", producers.size(),
           " gradient producers for ", params.size(), " parameters (and a deliver function with them)");
  RT_CHECK(opts_.first_bucket_bytes > 0 && opts_.bucket_bytes > 0, "Reducer: bucket caps must be positive");
  check_same_params(comm_, params, opts_.timeout);
  for (auto& [name, p] : params) {
    RT_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "Reducer: parameter ", name,
             " is not a leaf that requires grad");
    RT_CHECK(p.device() == comm_.device(), "Reducer: parameter ", name, " is on ", p.device().str(),
             ", the communicator on ", comm_.device().str());
    slots_.push_back(Slot{name, p, 0, 0, false});
  }
  // Reverse registration order, caps, one dtype per bucket (Note [Gradient buckets]).
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> bytes;
  for (size_t k = slots_.size(); k-- > 0;) {
    const Tensor& p = slots_[k].param;
    const size_t cap = groups.size() == 1 ? opts_.first_bucket_bytes : opts_.bucket_bytes;  // the open bucket's
    const bool fits =
        !groups.empty() && slots_[groups.back().front()].param.dtype() == p.dtype() && bytes.back() + p.nbytes() <= cap;
    if (!fits) {
      groups.emplace_back();
      bytes.push_back(0);
    }
    groups.back().push_back(k);
    bytes.back() += p.nbytes();
  }
  for (const auto& g : groups) {
    Bucket b;
    int64_t n = 0;
    for (size_t k : g) {
      slots_[k].bucket = buckets_.size();
      slots_[k].offset = n;
      n += slots_[k].param.numel();
    }
    b.flat = Tensor::zeros({n}, slots_[g.front()].param.dtype(), comm_.device());
    if (opts_.reduce_dtype && *opts_.reduce_dtype != b.flat.dtype())
      b.staging = Tensor::zeros({n}, *opts_.reduce_dtype, comm_.device());
    b.slots = g;
    buckets_.push_back(std::move(b));
  }
  for (size_t k = 0; k < slots_.size(); ++k) {
    Slot& s = slots_[k];
    s.param.set_grad_buffer(buckets_[s.bucket].flat.subview(s.offset, s.param.shape(), s.param.format()));
  }
  auto self = std::make_shared<Reducer*>(this);
  alive_ = self;
  for (size_t k = 0; k < slots_.size(); ++k) {
    Tensor producer = producers.empty() ? slots_[k].param : producers[k];
    producer.register_grad_ready_hook([self, k](const Tensor&) {
      if (*self) (*self)->on_ready(k);
    });
  }
}

Reducer::~Reducer() {
  if (alive_) *alive_ = nullptr;  // hooks outlive the reducer: they do nothing from now on
  for (Slot& s : slots_) {
    try {
      s.param.set_grad_buffer(Tensor());  // the gradient, if any, moves to a tensor of its own
    } catch (...) {
    }
  }
}

bool Reducer::capturing() const {
  return comm_.device().is_cuda() && cuda::stream_is_capturing(Stream::current(comm_.device()).handle());
}

double Reducer::now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

void Reducer::prepare(bool communicate) {
  armed_ = communicate;
  if (!communicate) return;
  for (Slot& s : slots_) s.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = b.slots.size();
    b.launched = false;
    b.work = Work();
  }
  next_launch_ = 0;
  t0_ = std::chrono::steady_clock::now();
  timeline_ = StepTimeline{};
  timeline_.buckets.assign(buckets_.size(), StepTimeline::Bucket{});
  if (last_end_) timeline_.since_previous = std::chrono::duration<double>(t0_ - *last_end_).count();
  captured_ = capturing();
  if (comm_.device().is_cuda() && !captured_) {  // Note [Two clocks]
    const Device d = comm_.device();
    step_.emplace(DeviceStep{Event(d), Event(d), Event(d), std::nullopt, {}});
    if (!on_device_.empty()) step_->previous_end = on_device_.back().wait_end;
    else if (last_device_end_) step_->previous_end = *last_device_end_;
    step_->start.record(Stream::current(d));
  }
}

void Reducer::on_ready(size_t k) {
  if (!armed_) return;  // an accumulation micro-step: the gradient stays in its bucket
  if (deliver_) deliver_(k);
  Slot& s = slots_[k];
  if (s.ready) return;  // a second backward through the same graph before finish()
  s.ready = true;
  if (--buckets_[s.bucket].pending == 0) {
    timeline_.buckets[s.bucket].ready = now();
    launch_ready();
  }
}

// Launches the complete buckets, in order (Note [Bucket launch order]).
void Reducer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void Reducer::launch(size_t b) {
  Bucket& bk = buckets_[b];
  // Stamped before the call: on a busy CPU the woken communication thread can run the whole
  // all-reduce before the call returns here, and `completed` would precede `launched`.
  timeline_.buckets[b].launched = now();
  // A bucket completed with zeros at the end of backward (find_unused) was ready then.
  if (timeline_.buckets[b].ready < 0) timeline_.buckets[b].ready = timeline_.buckets[b].launched;
  const flight::Purpose purpose("gradients", int(b));  // Note [Flight recorder] in distributed/flight_recorder.h
  const Fault& fault = injected_fault();  // a test's (distributed/fault.h)
  if (fault.kind != Fault::Kind::none && fault.rank == comm_.rank() && fault.bucket == int(b) &&
      fault.step == flight::current_step()) {
    const bool skip = fault.kind == Fault::Kind::skip_bucket;
    std::fprintf(stderr, "RINGTAPE_FAULT: rank %d %s bucket %zu's all-reduce at step %lld\n", comm_.rank(),
                 skip ? "skips" : "issues a barrier for", b, static_cast<long long>(fault.step));
    bk.work = skip ? Work() : comm_.barrier(opts_.timeout);
    bk.launched = true;
    ++collectives_;
    return;
  }
  if (bk.staging.defined()) {
    bk.staging.copy_(bk.flat);  // rounded on the compute stream, before the collective's event
    bk.work = comm_.all_reduce(bk.staging, ReduceOp::avg, opts_.algo, opts_.timeout);
  } else {
    bk.work = comm_.all_reduce(bk.flat, ReduceOp::avg, opts_.algo, opts_.timeout);
  }
  bk.launched = true;
  ++collectives_;
}

void Reducer::end_backward() {
  if (!armed_) return;
  armed_ = false;
  waiting_ = true;
  timeline_.backward_end = now();
  if (step_) step_->backward_end.record(Stream::current(comm_.device()));
  std::vector<std::string> unused;
  for (Bucket& b : buckets_)
    for (size_t k : b.slots)
      if (!slots_[k].ready) unused.push_back(slots_[k].name);
  if (!unused.empty()) {
    if (!opts_.find_unused) {
      std::ostringstream m;
      m << "data parallel: rank " << comm_.rank() << ": " << unused.size()
        << " parameter(s) got no gradient in this step: ";
      for (size_t i = 0; i < unused.size() && i < 8; ++i) m << (i ? ", " : "") << unused[i];
      if (unused.size() > 8) m << ", ...";
      m << ". Their buckets would never be all-reduced; if the model leaves parameters unused on purpose, "
           "set find_unused_parameters (their gradients are then reduced as zeros)";
      RT_FAIL(m.str());
    }
    // Zeros in their place (another rank may have used them), then the buckets in order.
    for (Bucket& b : buckets_)
      for (size_t k : b.slots)
        if (!slots_[k].ready) {
          Slot& s = slots_[k];
          s.param.grad_buffer().fill_(0.0);
          s.param.set_grad(s.param.grad_buffer());
          s.ready = true;
          --b.pending;
        }
    launch_ready();
  }
  RT_CHECK(next_launch_ == buckets_.size(), "Reducer: ", buckets_.size() - next_launch_,
           " bucket(s) not launched at the end of backward (a bug: every slot is ready)");
}

void Reducer::wait_for_gradients() {
  if (!waiting_) return;
  waiting_ = false;
  if (buckets_.empty()) return;
  // Issue order (Note [Issue order] in distributed/work.h): the last bucket done means all are.
  buckets_.back().work.block_stream(Stream::current(comm_.device()));
  for (Bucket& b : buckets_)
    if (b.staging.defined()) b.flat.copy_(b.staging);  // widened back (Note [Reduce dtype])
  if (captured_) return;  // no timeline: the step is being captured
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto end = buckets_[b].work.finished_at();
    if (end) timeline_.buckets[b].completed = std::chrono::duration<double>(*end - t0_).count();
  }
  last_end_ = std::chrono::steady_clock::now();
  timeline_.wait_end = std::chrono::duration<double>(*last_end_ - t0_).count();
  if (step_) {
    step_->wait_end.record(Stream::current(comm_.device()));
    for (const Bucket& b : buckets_) step_->works.push_back(b.work);
    on_device_.push_back(std::move(*step_));
    step_.reset();
  } else {
    finished_.push_back(timeline_);
  }
  settle(false);
}

// Note [Two clocks]. Every event of `d` has completed.
StepTimeline Reducer::resolve(const DeviceStep& d) const {
  const auto seconds = [&](const Event& from, const Event& to) { return double(from.elapsed_ms(to)) / 1e3; };
  StepTimeline t;
  t.clock = "device";
  t.backward_end = seconds(d.start, d.backward_end);
  t.wait_end = seconds(d.start, d.wait_end);
  if (d.previous_end) t.since_previous = seconds(*d.previous_end, d.start);
  t.buckets.assign(d.works.size(), StepTimeline::Bucket{});
  for (size_t b = 0; b < d.works.size(); ++b)
    if (const auto x = d.works[b].device_times(d.start))
      t.buckets[b] = StepTimeline::Bucket{x->ready_ms / 1e3, x->started_ms / 1e3, x->done_ms / 1e3};
  return t;
}

void Reducer::settle(bool wait) {
  if (capturing()) return;  // the host may not query events during a capture
  // Steps the device has not finished wait for a later call; but never more than a few, so
  // that a host running far ahead of the device does not hoard events (it waits for the
  // oldest then, which the device has almost reached by the time the host is that far ahead).
  constexpr size_t kMaxOnDevice = 8;
  while (!on_device_.empty()) {
    DeviceStep& d = on_device_.front();
    if (wait || on_device_.size() > kMaxOnDevice) d.wait_end.synchronize();
    else if (!d.wait_end.query()) break;
    finished_.push_back(resolve(d));
    last_device_end_ = d.wait_end;
    on_device_.pop_front();
  }
  // Kept for take_timelines(); a caller that never takes them (a test of the reduction) keeps
  // only the latest.
  constexpr size_t kMaxFinished = 1024;
  if (finished_.size() > kMaxFinished) finished_.erase(finished_.begin(), finished_.end() - kMaxFinished);
}

std::vector<StepTimeline> Reducer::take_timelines(bool wait) {
  settle(wait);
  std::vector<StepTimeline> out;
  out.swap(finished_);
  return out;
}

std::vector<Reducer::BucketInfo> Reducer::buckets() const {
  std::vector<BucketInfo> v;
  for (const Bucket& b : buckets_) {
    BucketInfo info{b.staging.defined() ? b.staging.dtype() : b.flat.dtype(), b.flat.numel(), {}};
    for (size_t k : b.slots) info.params.push_back(slots_[k].name);
    v.push_back(std::move(info));
  }
  return v;
}

// ---- the timeline ----------------------------------------------------------------------

namespace {
// Length of the union of intervals [a, b), each clipped to end at `limit`.
double union_length(std::vector<std::pair<double, double>> iv, double limit) {
  for (auto& [a, b] : iv) b = std::min(b, limit);
  std::sort(iv.begin(), iv.end());
  double total = 0, cur_a = 0, cur_b = -1;
  bool open = false;
  for (const auto& [a, b] : iv) {
    if (b <= a) continue;
    if (open && a <= cur_b) {
      cur_b = std::max(cur_b, b);
    } else {
      if (open) total += cur_b - cur_a;
      cur_a = a, cur_b = b, open = true;
    }
  }
  if (open) total += cur_b - cur_a;
  return total;
}
}  // namespace

double StepTimeline::comm_seconds() const {
  std::vector<std::pair<double, double>> iv;
  for (const Bucket& b : buckets) {
    if (b.launched < 0) continue;
    if (b.completed < 0) return -1;
    iv.emplace_back(b.launched, b.completed);
  }
  return iv.empty() ? -1 : union_length(iv, 1e300);
}

double StepTimeline::overlap() const {
  const double total = comm_seconds();
  if (total <= 0) return total < 0 ? -1 : 1;
  std::vector<std::pair<double, double>> iv;
  for (const Bucket& b : buckets)
    if (b.launched >= 0) iv.emplace_back(b.launched, b.completed);
  return union_length(iv, backward_end) / total;
}

void broadcast_from_rank0(Communicator& comm, const std::vector<Tensor>& tensors, Millis timeout) {
  if (comm.world_size() == 1) return;
  std::vector<Work> works;
  for (const Tensor& t : tensors) works.push_back(comm.broadcast(t, 0, timeout));
  for (const Work& w : works) w.wait();
}

}  // namespace rt::dist
