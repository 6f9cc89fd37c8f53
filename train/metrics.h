// <output-dir>/metrics.jsonl: one JSON object per logged training step and per evaluation,
// appended and flushed line by line (a resumed run continues the same file).
#pragma once

#include <cstdio>
#include <string>

#include "engine/io/json.h"

namespace rt::train {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);  // throws naming the path when it cannot be opened
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const json::Value& record);

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

// Top-1 and top-5 hits of a batch: logits (N x K) row-major, labels (N). A label counts
// as within top-k when fewer than k logits beat it (ties go to the lower class index,
// like a stable sort). An example with a NaN or Inf logit is a miss, counted in
// `nonfinite` (a diverged model must not score 100%).
void topk_hits(const float* logits, const int64_t* labels, int64_t N, int64_t K, int64_t* top1, int64_t* top5,
               int64_t* nonfinite);

}  // namespace rt::train
