#include "kernels/cuda/multi_tensor_plan.h"

#include "base/error.h"

namespace rt::cuda {

void plan_multi_tensor(std::vector<MtaRow>& rows, const std::vector<int>& set_id, std::vector<int32_t>& chunk_tensor,
                       std::vector<MtaRange>& ranges) {
  RT_CHECK(rows.size() == set_id.size(), "plan_multi_tensor: ", rows.size(), " tensors but ", set_id.size(),
           " scalar-set ids");
  RT_CHECK(rows.size() <= size_t(INT32_MAX), "plan_multi_tensor: ", rows.size(), " tensors are too many");
  chunk_tensor.clear();
  ranges.clear();
  MtaRange cur;
  for (size_t i = 0; i < rows.size(); ++i) {
    MtaRow& r = rows[i];
    RT_CHECK(r.n >= 0, "plan_multi_tensor: tensor ", i, " has a negative size ", r.n);
    r.index = int32_t(i);
    r.first_chunk = int64_t(chunk_tensor.size());
    // Its scalar set in the current launch, or a new launch when that one holds kMtaMaxGroups.
    int local = -1;
    for (size_t k = 0; k < cur.groups.size(); ++k)
      if (cur.groups[k] == set_id[i]) local = int(k);
    if (local < 0 && r.n > 0) {
      if (cur.groups.size() == size_t(kMtaMaxGroups)) {
        cur.chunk_end = r.first_chunk;
        ranges.push_back(std::move(cur));
        cur = MtaRange{};
        cur.chunk_begin = r.first_chunk;
      }
      cur.groups.push_back(set_id[i]);
      local = int(cur.groups.size()) - 1;
    }
    r.group = local < 0 ? 0 : local;  // an empty tensor has no chunk: no block reads its row
    cur.elements += r.n;
    for (int64_t c = mta_chunks(r.n); c > 0; --c) chunk_tensor.push_back(int32_t(i));
  }
  cur.chunk_end = int64_t(chunk_tensor.size());
  if (cur.chunk_end > cur.chunk_begin) ranges.push_back(std::move(cur));
}

}  // namespace rt::cuda
