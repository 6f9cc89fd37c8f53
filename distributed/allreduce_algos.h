// The project's own all-reduce algorithms (Note [All-reduce algorithms] in
// distributed/communicator.h), written once over a backend's point-to-point transfers and local
// reduce (P2P below): Gloo's unbound buffers and the CPU reduce on the communication
// thread, or ncclSend/ncclRecv and our CUDA reduce kernel on the communication stream.
//
// Both are lists of steps. A step is a group of sends and receives posted together (NCCL:
// one ncclGroupStart/End), then the reductions of what it received. Every rank derives
// every step from (rank, world, count, slice size) alone, so the transfers of a step match
// on both sides without any negotiation.
//
// Note [Slices and look-ahead]
// Data moves in slices of at most `slice_bytes`, and up to four steps are in flight:
// step u + W is posted once step u has completed and its received slices are reduced, so
// the wire carries some slices while others are reduced. Each schedule is laid out so that
// steps touching the same memory are at least W apart (each schedule's comment says why);
// with a single slice per piece (small messages) steps run strictly one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distributed/communicator.h"

namespace rt::dist {

// One transfer of a step: `bytes` at `ptr` to or from `peer`. `tag` is unique among the
// transfers between the same two ranks in the same step and equal on both sides.
struct Transfer {
  int peer;
  void* ptr;
  size_t bytes;
  uint32_t tag;
};

// What the algorithms need of a backend. Calls come from one thread, in order.
class P2P {
 public:
  virtual ~P2P() = default;
  // Posts a group of transfers; groups complete in the order they were started.
  virtual void start(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) = 0;
  // Waits for the oldest started group (Gloo), or only orders after it (NCCL: stream order).
  virtual void finish() = 0;
  // inout[0:n] = op(inout, in), elementwise, after the finished groups.
  virtual void reduce(ReduceOp op, DType t, int64_t n, const void* in, void* inout) = 0;
  // dst[0:bytes] = src, after the finished groups.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Note [Early receives]
  // Whether receives may be posted steps before the group they belong to. With Gloo a send
  // leaves only once its receiver has posted the receive (one message there and back before
  // the data), so a receive posted early saves that for small messages. An NCCL step must
  // hold both sides of its transfers in one group.
  virtual bool early_receives() const { return false; }
  // Receives of a later start(), posted now where early_receives(); that start() then
  // finds them posted (same peer and tag).
  virtual void expect(const std::vector<Transfer>& recvs) { (void)recvs; }
  // x[0:n] *= s (the 1/N of an average).
  virtual void scale(DType t, int64_t n, void* x, double s) = 0;
  // Memory on the backend's device for received slices, valid until the next call to
  // scratch(); a call may return the same memory as the last one.
  virtual void* scratch(size_t bytes) = 0;
};

struct AlgoShape {
  int rank, world;
  DType dtype;
  int64_t count;       // elements
  size_t slice_bytes;  // the pipeline's unit (CommOptions::slice_bytes)
};

// All-reduce of data[0:count] in place with the ring: reduce-scatter then all-gather.
void ring_all_reduce(P2P& p, const AlgoShape& s, void* data, ReduceOp op);
// Reduce-scatter with the ring: data[0 : world*count_per_rank] is reduced in place (used as
// work space), and rank r's block [r*n, (r+1)*n) holds the result.
void ring_reduce_scatter(P2P& p, const AlgoShape& s, void* data, ReduceOp op);
// All-reduce of data[0:count] in place with the double binary tree
// (Note [Pipelined tree schedule] in allreduce_algos.cc).
void tree_all_reduce(P2P& p, const AlgoShape& s, void* data, ReduceOp op);
// The most any of the three asks of P2P::scratch() with this slice size, whatever the
// count, dtype and world: what a backend can allocate once, up front (the NCCL communicator
// does, so that no allocation happens while it holds its issue lock).
size_t max_scratch_bytes(size_t slice_bytes);

// ---- the trees, exposed for tests -----------------------------------------------------
// Note [Double binary tree]
// Tree 0 is the in-order binary tree of the positions 1..N by their lowest set bit: the root
// is the largest power of two <= N, a position with lowest bit 2^k (k >= 1) has children
// position - 2^(k-1) and the largest position + 2^(k-1-j) <= N (j >= 0), and odd positions
// are leaves. Rank r sits at position r+1 in tree 0, so the even ranks are its leaves. Tree
// 1 is the same tree over a relabelling that makes the odd ranks its leaves: rank r at
// position N-r (N even) or at position ((r+N-1) mod N)+1 (N odd, where rank 0 is a leaf of
// both). Depth about log2(N).
struct TreeNode {
  int parent = -1;              // -1: the root
  std::vector<int> children;    // 0, 1 or 2 ranks
  int depth = 0;                // 0 at the root
};
struct Tree {
  std::vector<TreeNode> nodes;  // by rank
  int max_depth = 0;
};
Tree double_binary_tree(int world, int which);  // which: 0 or 1

}  // namespace rt::dist
