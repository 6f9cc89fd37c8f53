// Loader: the batches of an epoch, in order, optionally built ahead by worker threads.
//
//   Loader loader(dataset, Sampler(dataset.size(), 128, {.seed = 1}), {.workers = 4});
//   loader.start_epoch(epoch, first_batch);        // first_batch > 0 resumes mid-epoch
//   while (auto b = loader.next()) train_step(b->images, b->labels);
//
// Batch k of an epoch depends only on (dataset, sampler, augmentation seed, epoch, k):
// it is the same for any worker count and whether the epoch started at 0 or resumed.
// Workers claim batch indices in order and may run at most `prefetch` batches ahead of
// the consumer, which bounds memory. An exception thrown while building batch k is
// rethrown by the next() call that would have returned batch k.
//
// Unreadable examples are replaced (Note [Unreadable examples] in data/loading/batch.h); next()
// names each such file on stderr the first time it is met and counts them per epoch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/loading/batch.h"
#include "data/datasets/dataset.h"
#include "data/loading/sampler.h"

namespace rt::data {

struct LoaderOptions {
  int workers = 0;   // background threads; 0 = build each batch inside next()
  int prefetch = 0;  // batches built ahead of the consumer; 0 = 2 per worker
  bool strict = false;      // unreadable examples are errors (--strict-images)
  bool pin_memory = false;  // batches in page-locked memory, for asynchronous copies to a GPU
  bool log_skipped = true;  // name each unreadable file on stderr (once)
};

class Loader {
 public:
  // `dataset` must outlive the loader. The sampler must be for dataset.size() examples.
  Loader(const Dataset& dataset, Sampler sampler, const LoaderOptions& opt = {});
  ~Loader();  // stops and joins the workers; never throws
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins `epoch` at batch `first_batch` (0 <= first_batch <= num_batches()), abandoning
  // whatever is left of the previous epoch.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the epoch, or nullopt once it is over.
  std::optional<Batch> next();

  int64_t num_batches() const { return sampler_.num_batches(); }
  const Sampler& sampler() const { return sampler_; }
  // Unreadable examples replaced in the batches next() returned this epoch.
  int64_t skipped_in_epoch() const { return skipped_in_epoch_; }

 private:
  struct Slot {
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };

  Batch build(int64_t k) const;
  Batch deliver(Batch b);  // reports unreadable examples, counts them
  void worker_loop();
  void stop_workers() noexcept;

  const Dataset& dataset_;
  Sampler sampler_;
  LoaderOptions opt_;
  int64_t capacity_;

  // Fixed while an epoch's workers run.
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
  std::vector<int64_t> draws_;  // per position of order_ (Note [Repeated augmentation])
  bool started_ = false;
  int64_t skipped_in_epoch_ = 0;
  std::set<std::string> reported_;  // unreadable files already named

  std::mutex mu_;
  std::condition_variable work_cv_;   // workers: a batch may be claimed, or stop
  std::condition_variable ready_cv_;  // consumer: a slot became ready
  int64_t next_claim_ = 0;            // next batch index a worker will build
  int64_t next_out_ = 0;              // next batch index next() returns
  bool stop_ = false;
  bool failed_ = false;               // a worker failed: claim nothing more
  std::exception_ptr error_;          // rethrown by every next() after it surfaced
  std::vector<Slot> ring_;            // batch k lives in ring_[k % capacity_]
  std::vector<std::thread> threads_;
};

}  // namespace rt::data
