// The host half of the multi-tensor apply (kernels/cuda/multi_tensor_apply.cuh): how a list
// of tensors is cut into chunks, which block walks which chunk, and how the launches are
// split when the tensors carry more distinct scalars than one launch holds. Plain C++, so
// a CPU test (tests/multi_tensor_plan_test.cc) checks the partition on every machine.
//
// Note [Multi-tensor apply]
// An optimizer step, a gradient norm, a loss-scale check or an EMA update does the same
// small piece of arithmetic on every element of every parameter. One launch per tensor
// costs ResNet50 161 launches of mostly tiny tensors (its 106 batch-norm vectors hold 64 to
// 2048 elements); one launch per few dozen tensors, with the pointers in the kernel's
// parameter block (PyTorch's MultiTensorApply.cuh, apex's multi_tensor_apply), still grows
// with the parameter count. Here the list lives in device memory instead:
//   - every tensor is cut into chunks of kMtaChunk elements (the last one shorter); the
//     chunks of all tensors are numbered in list order, tensor i's from rows[i].first_chunk;
//   - the device table is the rows (pointers, sizes, first chunk, scalar set) followed by
//     chunk_tensor[c], the row of chunk c; block b walks chunks b, b + gridDim.x, ...;
//   - per-tensor scalars that change from step to step (a learning rate, Adam's bias
//     corrections, SGD's first step) are not in the table: a row names one of at most
//     kMtaMaxGroups scalar sets that travel by value in the launch's parameters. A list
//     whose tensors carry more distinct sets is cut into consecutive ranges of at most
//     kMtaMaxGroups sets each, one launch per range (a range is contiguous in chunks).
// So the table changes only when the list does (parameters, gradients and optimizer state
// keep their storage from step to step), it is uploaded again only then
// (kernels/cuda/multi_tensor_table.h), and an optimizer step is one launch per dtype
// whatever the number of parameters. Results do not depend on the grid: every element is
// computed by the same arithmetic, and sums go per chunk into fixed slots
// (Note [Deterministic norms] in kernels/cuda/grad_norm.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rt::cuda {

inline constexpr int64_t kMtaChunk = int64_t(1) << 16;  // elements per chunk (one block's work)
inline constexpr int kMtaDepth = 5;       // pointers per tensor: the most an op needs (AdamW: p, g, m, v, bf16 copy)
inline constexpr int kMtaMaxGroups = 8;   // distinct scalar sets one launch carries
inline constexpr int kMtaMaxBlocks = 4096;  // a launch's grid; more chunks than this are strided over

// One tensor of the list, as the device reads it (the same layout for the host and nvcc).
struct MtaRow {
  void* ptr[kMtaDepth];  // the op's operands (unused ones null), each n elements
  int64_t n;
  int64_t first_chunk;   // its chunks: first_chunk .. first_chunk + mta_chunks(n) - 1
  int32_t group;         // its scalar set within its launch (0 .. kMtaMaxGroups - 1)
  int32_t index;         // its position in the list
};
static_assert(sizeof(MtaRow) == 8 * kMtaDepth + 24, "MtaRow is read by the device: no padding surprises");

inline int64_t mta_chunks(int64_t n) { return (n + kMtaChunk - 1) / kMtaChunk; }

// One launch: chunks [chunk_begin, chunk_end) and the caller's scalar-set ids its rows' local
// group numbers stand for (groups[k] is local group k).
struct MtaRange {
  int64_t chunk_begin = 0, chunk_end = 0;
  int64_t elements = 0;  // of its tensors (the kernel lab's FLOP count)
  std::vector<int> groups;
};

// rows[i].ptr and .n set by the caller, `set_id[i]` its scalar set (any int: equal ids share
// one set). Fills first_chunk, group and index of every row, chunk_tensor (the row of every
// chunk) and the launches (none for an empty list or one of empty tensors). Throws on a
// negative size.
void plan_multi_tensor(std::vector<MtaRow>& rows, const std::vector<int>& set_id, std::vector<int32_t>& chunk_tensor,
                       std::vector<MtaRange>& ranges);

// Scalar-set ids for per-tensor keys: equal keys (operator==) get equal ids, in order of
// first appearance (so the ids stay the same from step to step while the keys do).
template <typename Key>
std::vector<int> mta_set_ids(const std::vector<Key>& keys, std::vector<Key>& distinct) {
  distinct.clear();
  std::vector<int> ids(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::size_t k = 0;
    while (k < distinct.size() && !(distinct[k] == keys[i])) ++k;
    if (k == distinct.size()) distinct.push_back(keys[i]);
    ids[i] = int(k);
  }
  return ids;
}

}  // namespace rt::cuda
