// Helpers for the communicator tests: one rank's job (the store rank 0 hosts,
// distributed/rendezvous.h, and a Gloo communicator) built from the environment
// tests/distributed/launch.h gives each process, checks that throw rt::Error naming the first
// difference (a rank's failure is its exit code and message), and the deterministic inputs
// every rank can compute for every other rank.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "distributed/gloo_communicator.h"
#include "distributed/launch_env.h"
#include "distributed/rendezvous.h"
#include "base/error.h"
#include "engine/tensor.h"
#include "kernels/cuda/runtime.h"

namespace rt::dist::testing {

class GlooRank {
 public:
  explicit GlooRank(CommOptions opts = {}) {
    const LaunchEnv env = launch_env_from_process();
    store_ = connect_store(env, opts.timeout);
    if (opts.host.empty()) opts.host = "127.0.0.1";
    comm_ = std::make_unique<GlooCommunicator>(*store_.store, env.rank, env.world_size, opts);
  }
  // A barrier, so that rank 0's store outlives every rank's setup (the store is used only
  // there); it fails at once on a communicator a test broke on purpose.
  // None on a rank that fails (destroyed while an exception unwinds): it leaves at once.
  ~GlooRank() {
    try {
      if (comm_->world_size() > 1 && std::uncaught_exceptions() == 0) comm_->barrier().wait();
    } catch (const std::exception&) {  // a test that broke the communicator on purpose
    }
  }
  GlooRank(const GlooRank&) = delete;
  GlooRank& operator=(const GlooRank&) = delete;

  Communicator& comm() { return *comm_; }

 private:
  RendezvousStore store_;
  std::unique_ptr<GlooCommunicator> comm_;
};

// An integer-valued input, different per rank and element, small enough that sums over 8
// ranks are exact in every float type.
inline double int_value(int rank, int64_t i) { return double((rank * 31 + i * 7) % 23) - 11.0; }

inline Tensor int_tensor(int rank, int64_t n, DType t) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int_value(rank, i);
  return Tensor::from_vector(v, {n}).to(t);
}

// Throws naming the first element that differs (exact comparison).
inline void expect_equal(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  RT_CHECK(got.size() == want.size(), what, ": ", got.size(), " elements, expected ", want.size());
  for (size_t i = 0; i < got.size(); ++i)
    RT_CHECK(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])), what, ": element ", i, " of ",
             got.size(), " is ", got[i], ", expected ", want[i]);
}

inline void expect_equal(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  expect_equal(got.to_vector<double>(), want, what);
}

// True when a GPU is usable; otherwise prints the SKIPPED line and the test passes.
inline bool have_gpu(const char* test) {
  std::string why;
  if (cuda::device_count(&why) > 0) return true;
  std::printf("SKIPPED: no CUDA device (%s): %s\n", why.c_str(), test);
  return false;
}

}  // namespace rt::dist::testing
