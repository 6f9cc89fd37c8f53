#include "train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace rt::train {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "a");
  RT_CHECK(f_, "cannot open metrics file '", path, "' for appending: ", std::strerror(errno),
           " (is --output-dir writable?)");
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const json::Value& record) {
  const std::string line = json::dump(record) + "\n";
  RT_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
           "writing metrics to '", path_, "' failed: ", std::strerror(errno), " (disk full?)");
}

void topk_hits(const float* logits, const int64_t* labels, int64_t N, int64_t K, int64_t* top1, int64_t* top5,
               int64_t* nonfinite) {
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logits + i * K;
    bool finite = true;
    for (int64_t k = 0; k < K; ++k) finite &= std::isfinite(z[k]);
    if (!finite) {  // NaN compares false with everything: it would rank first
      ++*nonfinite;
      continue;
    }
    const int64_t y = labels[i];
    const float zy = z[y];
    int64_t rank = 0;  // classes ranked before the label
    for (int64_t k = 0; k < K; ++k) rank += z[k] > zy || (z[k] == zy && k < y);
    *top1 += rank < 1;
    *top5 += rank < 5;
  }
}

}  // namespace rt::train
