// <output-dir>/logs/rank-K.log: everything a data-parallel rank prints (stdout and stderr),
// copied to a file while it still goes where it went (rank 0's console; the launcher's pipe,
// which keeps the last lines of a failed rank). A thread copies: stdout and stderr are
// redirected into one pipe each, and every chunk read goes to the file and to the original
// stream. The destructor puts the streams back and drains the pipes.
#pragma once

#include <cstdio>
#include <string>
#include <thread>

namespace rt::train {

class RankLog {
 public:
  explicit RankLog(const std::string& path);  // throws rt::Error naming the path it cannot open
  ~RankLog();                                 // never throws
  RankLog(const RankLog&) = delete;
  RankLog& operator=(const RankLog&) = delete;

 private:
  int saved_[2] = {-1, -1};  // the original stdout and stderr
  int read_[2] = {-1, -1};   // the pipes' read ends
  std::FILE* file_ = nullptr;
  std::thread copier_;
};

}  // namespace rt::train
