#include "data/loading/loader.h"

#include "engine/profiler.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"

namespace rt::data {

Loader::Loader(const Dataset& dataset, Sampler sampler, const LoaderOptions& opt)
    : dataset_(dataset), sampler_(std::move(sampler)), opt_(opt) {
  RT_CHECK(sampler_.dataset_size() == dataset.size(), "loader: the sampler was made for ", sampler_.dataset_size(),
           " examples but dataset ", dataset.name(), " has ", dataset.size());
  RT_CHECK(opt.workers >= 0, "loader: workers ", opt.workers, " must be >= 0");
  RT_CHECK(opt.prefetch >= 0, "loader: prefetch ", opt.prefetch, " must be >= 0 (0 = 2 per worker)");
  capacity_ = opt.prefetch > 0 ? opt.prefetch : 2 * int64_t(opt.workers);
  if (capacity_ < 1) capacity_ = 1;
}

Loader::~Loader() { stop_workers(); }

void Loader::stop_workers() noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) {
    try {
      if (t.joinable()) t.join();
    } catch (...) {
      // join only fails on a thread that cannot be joined; nothing left to clean up.
    }
  }
  threads_.clear();
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  RT_CHECK(first_batch >= 0 && first_batch <= num_batches(), "loader: first batch ", first_batch,
           " is outside [0, ", num_batches(), "] for an epoch of ", num_batches(), " batches");
  stop_workers();
  epoch_ = epoch;
  order_ = sampler_.epoch_indices(epoch);
  draws_ = sampler_.epoch_draws(epoch);
  next_claim_ = next_out_ = first_batch;
  stop_ = failed_ = false;
  error_ = nullptr;
  ring_.assign(size_t(capacity_), Slot{});
  started_ = true;
  skipped_in_epoch_ = 0;
  for (int i = 0; i < opt_.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

Batch Loader::build(int64_t k) const {
  const int64_t b = sampler_.batch_size();
  const int64_t begin = k * b, end = std::min<int64_t>(begin + b, int64_t(order_.size()));
  AssembleOptions ao;
  ao.strict = opt_.strict;
  ao.pin_memory = opt_.pin_memory;
  return assemble_batch(dataset_, order_, begin, end, epoch_, k, ao, draws_);
}

Batch Loader::deliver(Batch b) {
  skipped_in_epoch_ += int64_t(b.skipped.size());
  for (const SkippedExample& s : b.skipped)
    if (opt_.log_skipped && reported_.insert(s.source).second) {
      // Decoders' messages already start with the file name.
      const bool named = s.reason.rfind(s.source, 0) == 0;
      std::fprintf(stderr, "skipping unreadable image %s%s%s\n", named ? "" : s.source.c_str(), named ? "" : ": ",
                   s.reason.c_str());
    }
  return b;
}

void Loader::worker_loop() {
  prof::thread_id("loader");  // its track in a profile's timeline
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t end = num_batches();
  for (;;) {
    // Claim only within `capacity_` of the consumer: slot k % capacity_ is then free
    // (its previous batch, k - capacity_, was already taken by next()).
    work_cv_.wait(lock, [&] { return stop_ || failed_ || next_claim_ >= end || next_claim_ < next_out_ + capacity_; });
    if (stop_ || failed_ || next_claim_ >= end) return;
    const int64_t k = next_claim_++;
    lock.unlock();
    Slot s;
    try {
      const prof::RangeScope range(prof::EventKind::range, "batch " + std::to_string(k + 1));
      s.batch = build(k);
    } catch (...) {
      s.error = std::current_exception();
    }
    lock.lock();
    if (s.error) failed_ = true;
    s.ready = true;
    ring_[size_t(k % capacity_)] = std::move(s);
    ready_cv_.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  RT_CHECK(started_, "loader: next() before start_epoch(); call start_epoch(epoch) first");
  if (error_) std::rethrow_exception(error_);
  if (next_out_ >= num_batches()) return std::nullopt;
  if (opt_.workers == 0) {
    const int64_t k = next_out_;
    try {
      Batch b = build(k);
      ++next_out_;
      return deliver(std::move(b));
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  Slot& slot = ring_[size_t(next_out_ % capacity_)];
  ready_cv_.wait(lock, [&] { return slot.ready; });
  Slot s = std::move(slot);
  slot = Slot{};
  ++next_out_;
  lock.unlock();
  work_cv_.notify_all();
  if (s.error) {
    error_ = s.error;
    std::rethrow_exception(s.error);
  }
  return deliver(std::move(s.batch));
}

}  // namespace rt::data
