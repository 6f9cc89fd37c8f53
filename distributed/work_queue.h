// WorkQueue: the communication thread of a CPU backend. Jobs run one at a time, in the
// order they were submitted (Note [Issue order] in distributed/work.h), while the submitting
// thread keeps computing; each submit() returns a Work at once.
//
// A job that throws breaks the queue: its Work fails with the message the owner's
// `describe` makes of the exception, and every job after it (pending or submitted later)
// fails without running, with "not run: ..." and that first message. A broken connection
// cannot be trusted again (Gloo's contexts cannot be reused after an I/O error).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/work.h"

namespace rt::dist {

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Millis = std::chrono::milliseconds;
  // A job: runs until done or until `deadline`, throwing on failure.
  using JobFn = std::function<void(Clock::time_point deadline)>;
  // The message a failed job's Work reports: (what the job was, its timeout, how long it
  // ran, what it threw) -> a message naming the operation, the peer and the elapsed time.
  using Describe =
      std::function<std::string(const std::string& what, Millis timeout, Clock::duration ran, std::exception_ptr)>;

  explicit WorkQueue(Describe describe);
  // Jobs not yet started fail ("the communicator was destroyed"); the running one ends (its
  // deadline bounds it) and the thread is joined. Never throws.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `fn`; its deadline is `timeout` after it starts running. The job owns what it
  // captures (tensors stay alive until it has run).
  Work submit(std::string what, Millis timeout, JobFn fn);

  // The first failure's message, "" while none failed.
  std::string failure() const;

 private:
  struct State;  // one job's completion, shared with its Work
  class HostWork;
  struct Job {
    std::string what;
    Millis timeout;
    JobFn fn;
    std::shared_ptr<State> state;
  };
  void loop();
  static void finish(State& s, std::string error) noexcept;

  Describe describe_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::string failure_;  // the first failed job's message
  std::thread thread_;   // last: starts after everything above exists
};

}  // namespace rt::dist
