// uint8 pixels -> normalised float32: (v / 255 - mean[c]) / std[c].
//
// A 256-entry table per channel turns the conversion into one load per pixel, and the
// values are computed in double once, so every path (and every worker) gets the same
// bits for the same pixel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::data {

class PixelNormalizer {
 public:
  // `mean` and `std` hold 0 values (no normalisation: v / 255), 1 value (every channel) or
  // `channels` values. `what` names the source in error messages.
  PixelNormalizer(int64_t channels, const std::vector<double>& mean, const std::vector<double>& std,
                  const std::string& what);
  // chw: `channels` planes of `plane` pixels each.
  void apply(const uint8_t* chw, int64_t plane, float* out) const;

 private:
  int64_t channels_;
  std::vector<float> table_;  // channels x 256
};

}  // namespace rt::data
