// The conv2d configurations every conv2d test runs (CPU: tests/conv2d_test.cc; CUDA:
// tests/cuda/conv2d_cuda_test.cc): odd sizes, strides, pointwise, the stem, dilation, groups.
#pragma once

#include <vector>

#include "engine/ops.h"

namespace rt::test {

struct ConvCase {
  int64_t N, C, H, W, O, KH, KW;
  Conv2dParams p;
  bool bias;
};

inline const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {2, 3, 7, 9, 4, 3, 3, Conv2dParams::make(1, 1), true},         // 3x3 same, odd sizes
      {1, 4, 8, 8, 6, 3, 3, Conv2dParams::make(2, 1), false},        // bottleneck's strided 3x3
      {3, 5, 6, 5, 7, 1, 1, Conv2dParams::make(1, 0), true},         // pointwise
      {2, 4, 7, 7, 8, 1, 1, Conv2dParams::make(2, 0), false},        // downsample 1x1 stride 2
      {1, 3, 11, 10, 4, 7, 7, Conv2dParams::make(2, 3), false},      // the stem's 7x7
      {2, 4, 9, 8, 4, 3, 3, Conv2dParams::make(1, 2, 2), true},      // dilation 2
      {2, 6, 5, 7, 4, 3, 3, Conv2dParams::make(1, 1, 1, 2), true},   // groups 2
      {1, 4, 6, 6, 4, 3, 3, Conv2dParams::make(1, 1, 1, 4), false},  // depthwise
      {2, 2, 5, 6, 3, 2, 3, {2, 1, 0, 1, 1, 2, 1}, true},            // asymmetric everything
  };
  return cases;
}

}  // namespace rt::test
