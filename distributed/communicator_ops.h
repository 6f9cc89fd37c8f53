// The reductions and all-reduce algorithms a Communicator offers, by name: what the
// command line, the kernels and the communicator share (no tensors, no CUDA).
#pragma once

#include <cstdint>
#include <string>

namespace rt::dist {

enum class ReduceOp : uint8_t { sum, avg, max };
inline constexpr const char* kReduceOpNames[] = {"sum", "avg", "max"};
static_assert(sizeof(kReduceOpNames) / sizeof(kReduceOpNames[0]) == int(ReduceOp::max) + 1, "name table");
inline const char* reduce_op_name(ReduceOp op) { return kReduceOpNames[int(op)]; }

enum class AllReduceAlgo : uint8_t { library, ring, tree };
inline constexpr const char* kAllReduceAlgoNames[] = {"library", "ring", "tree"};
static_assert(sizeof(kAllReduceAlgoNames) / sizeof(kAllReduceAlgoNames[0]) == int(AllReduceAlgo::tree) + 1,
              "name table");
inline const char* algo_name(AllReduceAlgo a) { return kAllReduceAlgoNames[int(a)]; }
// "library", "ring" or "tree" (what --allreduce takes). Anything else throws rt::Error
// listing the choices.
AllReduceAlgo parse_allreduce_algo(const std::string& s);

}  // namespace rt::dist
