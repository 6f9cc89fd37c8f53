#include "dist/sync_batch_norm.h"

#include <algorithm>

namespace rt::dist {

std::vector<double> SyncBatchNorm::gather(const std::vector<double>& block) {
  const int64_t n = int64_t(block.size());
  const Tensor in = Tensor::from_vector(block, {n}).to(comm_.device());
  const Tensor out = Tensor::empty({n * comm_.world_size()}, DType::f64, comm_.device());
  ++calls_;
  comm_.all_gather(out, in, timeout_).wait();
  return out.to(Device::cpu()).to_vector<double>();
}

double SyncBatchNorm::combine_stats(int64_t C, double count, double* mean, double* m2) {
  // Block: count, mean[C], m2[C] (merge_moments' layout).
  std::vector<double> block(size_t(1 + 2 * C));
  block[0] = count;
  std::copy(mean, mean + C, block.begin() + 1);
  std::copy(m2, m2 + C, block.begin() + 1 + C);
  const std::vector<double> all = gather(block);
  return merge_moments(C, comm_.world_size(), all.data(), mean, m2);
}

void SyncBatchNorm::combine_grad_sums(int64_t C, double* sum_dz, double* sum_dz_xmu) {
  std::vector<double> block(size_t(2 * C));
  std::copy(sum_dz, sum_dz + C, block.begin());
  std::copy(sum_dz_xmu, sum_dz_xmu + C, block.begin() + C);
  const std::vector<double> all = gather(block);
  sum_grad_sums(C, comm_.world_size(), all.data(), sum_dz, sum_dz_xmu);  // rank order: the same on every rank
}

}  // namespace rt::dist
