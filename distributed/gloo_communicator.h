// GlooCommunicator: the Communicator for CPU tensors, over Gloo's TCP transport (Debian's
// libgloo-dev, see docs/gloo.md for its header pitfalls).
//
// Every call runs on one communication thread (distributed/work_queue.h), in issue order, while
// the caller keeps computing. `library` is Gloo's ring allreduce; broadcast, all_gather and
// barrier are Gloo's; reduce_scatter is our ring's reduce-scatter half (Gloo 0.5 has no
// reduce-scatter in its options API); ring, tree and send/recv run on Gloo's unbound
// buffers (distributed/allreduce_algos.h). Reductions: f32 and f64 (bf16/f16 CPU tensors are
// refused: reduce them in f32). Moving data (broadcast, all_gather, send/recv): any dtype.
//
// Peers are found through the store: Gloo's full mesh (keys <prefix>/gloo/...) and one
// liveness link per peer (distributed/communicator_liveness.h) that names a rank whose process
// died in the error of every collective that fails because of it.
#pragma once

#include <memory>

#include "distributed/communicator.h"
#include "distributed/store.h"

namespace rt::dist {

class GlooCommunicator final : public Communicator {
 public:
  // Connects to every other rank through `store` within opts.timeout; throws rt::Error
  // naming the ranks that did not come. `store` is used only here.
  GlooCommunicator(Store& store, int rank, int world, CommOptions opts = {});
  // Calls not yet started fail; the running one ends (its timeout bounds it). Never throws.
  ~GlooCommunicator() override;

  const char* backend() const override { return "gloo"; }

 protected:
  Work run(Call call) override;
  void check_reducible(DType t, const std::string& what) const override;

 private:
  struct Impl;  // Gloo's types stay out of this header
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::dist
