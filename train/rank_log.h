// <output-dir>/logs/rank-K.log: everything a data-parallel rank prints (stdout and stderr),
// copied to a file while it still goes where it went (rank 0's console; the launcher's pipe,
// which keeps the last lines of a failed rank). A thread copies: stdout and stderr are
// redirected into one pipe each, and every chunk read goes to the file and to the original
// stream. The destructor puts the streams back and drains the pipes.
//
// Note [Whole rank logs]
// The log must hold a failed rank's opening lines and its fatal error, the two things one
// reads it for. So copying starts when the rank starts, before the run's directory is known
// (rank 0 chooses it): what comes first is kept in memory and written when open() names the
// file. The log lives until the process ends (run_train keeps it), so the error main()
// prints after the run has unwound goes to the file too. A rank that dies of a signal
// (abort(): std::terminate, a library's assertion) has its last output still in the pipes,
// which only this process reads: a handler of the fatal signals drains them to the file and
// the console before the signal takes its course.
#pragma once

#include <mutex>
#include <string>
#include <thread>

namespace rt::train {

class RankLog {
 public:
  RankLog();   // starts copying; throws rt::Error when the pipes cannot be made
  ~RankLog();  // never throws
  RankLog(const RankLog&) = delete;
  RankLog& operator=(const RankLog&) = delete;

  // From now on the copies go to `path` (appended), after what was printed so far.
  // Throws rt::Error naming the path it cannot open.
  void open(const std::string& path);
  // Where stdout went before the copying began (whether it is a terminal, its width).
  int original_stdout() const { return saved_[0]; }

 private:
  void write_copy(const char* data, size_t n);

  int saved_[2] = {-1, -1};  // the original stdout and stderr
  int read_[2] = {-1, -1};   // the pipes' read ends
  std::mutex mu_;            // guards file_ and early_
  int file_ = -1;            // the log's descriptor, once open()
  std::string early_;        // what was printed before open()
  std::thread copier_;
};

}  // namespace rt::train
