#include "distributed/work_queue.h"

#include "engine/profiler.h"

#include <utility>

#include "base/error.h"

namespace rt::dist {

struct WorkQueue::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // "" on success
  std::chrono::steady_clock::time_point finished;  // when done became true
};

class WorkQueue::HostWork final : public WorkImpl {
 public:
  explicit HostWork(std::shared_ptr<State> s) : s_(std::move(s)) {}
  void wait() override {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->cv.wait(lock, [&] { return s_->done; });
    if (!s_->error.empty()) throw Error(s_->error);
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->done;
  }
  void block_stream(const Stream&) override { wait(); }  // the host is the only "stream" here
  std::optional<std::chrono::steady_clock::time_point> finished_at() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!s_->done) return std::nullopt;
    return s_->finished;
  }

 private:
  std::shared_ptr<State> s_;
};

WorkQueue::WorkQueue(Describe describe) : describe_(std::move(describe)), thread_([this] { loop(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Work WorkQueue::submit(std::string what, Millis timeout, JobFn fn) {
  auto state = std::make_shared<State>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    RT_CHECK(!stopping_, what, ": the communicator is being destroyed");
    jobs_.push_back(Job{std::move(what), timeout, std::move(fn), state});
  }
  cv_.notify_all();
  return Work(std::make_shared<HostWork>(state));
}

std::string WorkQueue::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void WorkQueue::finish(State& s, std::string error) noexcept {
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.done = true;
    s.finished = std::chrono::steady_clock::now();
    s.error = std::move(error);
  }
  s.cv.notify_all();
}

void WorkQueue::loop() {
  prof::thread_id("communication");  // its track in a profile's timeline
  for (;;) {
    Job job;
    std::string failed_before;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      if (stopping_) failed_before = "the communicator was destroyed";
      else if (!failure_.empty()) failed_before = "this communicator failed earlier: " + failure_;
    }
    if (!failed_before.empty()) {
      finish(*job.state, job.what + " not run: " + failed_before);
      continue;
    }
    const auto start = Clock::now();
    std::string error;
    try {
      const prof::RangeScope range(prof::EventKind::range, job.what);  // a bucket's all-reduce, on its own track
      job.fn(start + job.timeout);
    } catch (...) {
      try {
        error = describe_(job.what, job.timeout, Clock::now() - start, std::current_exception());
      } catch (const std::exception& e) {  // describing must not kill the thread
        error = job.what + " failed: " + e.what();
      }
      if (error.empty()) error = job.what + " failed";
      std::lock_guard<std::mutex> lock(mu_);
      failure_ = error;
    }
    job.fn = nullptr;  // release the job's tensors before the waiter wakes
    finish(*job.state, std::move(error));
  }
}

}  // namespace rt::dist
