// Helpers for the NCCL fake's tests (tests/cuda_emu/nccl_*_test.cc), whose ranks are real
// processes (tests/distributed/launch.h) or threads: checks that throw (a rank's failure is its
// exit code and message), the unique id passed from rank 0 to the others through a file,
// files as signals between ranks, device buffers, and one rank's communicator on its own
// device (cudaSetDevice(rank), as torchrun's LOCAL_RANK). Under --config=cuda-emu only.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rt::emu_test {

using Clock = std::chrono::steady_clock;

template <class... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  os << std::setprecision(17);  // floats in messages tell apart values one rounding apart
  (os << ... << a);
  return os.str();
}

// Throws (the rank fails with the message) unless `ok`.
template <class... A>
void expect(bool ok, const A&... what) {
  if (!ok) throw std::runtime_error(cat(what...));
}

inline void nccl_ok(ncclResult_t r, const char* call, int line) {
  expect(r == ncclSuccess, "line ", line, ": ", call, " returned ", ncclGetErrorString(r), ": ", ncclGetLastError(nullptr));
}
inline void cuda_ok(cudaError_t e, const char* call, int line) {
  expect(e == cudaSuccess, "line ", line, ": ", call, " returned ", cudaGetErrorString(e));
}
#define NCCL_OK(call) ::rt::emu_test::nccl_ok((call), #call, __LINE__)
#define CUDA_OK(call) ::rt::emu_test::cuda_ok((call), #call, __LINE__)

// A file path of its own for each use, under the test's temporary directory.
inline std::string fresh_path(const std::string& tag) {
  static std::atomic<int> n{0};
  const char* dir = std::getenv("TEST_TMPDIR");
  return cat(dir && *dir ? dir : "/tmp", "/nccl_", tag, "_", getpid(), "_", n++);
}

// A signal between processes: the file exists.
inline void signal_file(const std::string& path) { std::ofstream(path) << "1"; }
inline bool wait_file(const std::string& path, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (access(path.c_str(), F_OK) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Rank 0 makes the id (ncclGetUniqueId) and writes it to `path`; the others read it.
inline ncclUniqueId share_id(int rank, const std::string& path) {
  ncclUniqueId id{};
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    std::ofstream(path + ".tmp", std::ios::binary).write(id.internal, sizeof id.internal);
    expect(std::rename((path + ".tmp").c_str(), path.c_str()) == 0, "cannot rename ", path, ".tmp");
    return id;
  }
  expect(wait_file(path, 30), "rank ", rank, ": rank 0 never wrote the unique id to ", path);
  std::ifstream in(path, std::ios::binary);
  in.read(id.internal, sizeof id.internal);
  expect(in.gcount() == sizeof id.internal, "rank ", rank, ": a short unique id in ", path);
  return id;
}

// Device memory holding a copy of `v`, freed at the end of its scope.
template <class T>
class DeviceVec {
 public:
  explicit DeviceVec(size_t n) : n_(n) { CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p_), bytes())); }
  explicit DeviceVec(const std::vector<T>& v) : DeviceVec(v.size()) {
    CUDA_OK(cudaMemcpy(p_, v.data(), bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceVec() { cudaFree(p_); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // After the stream's work: the host reads what it wrote.
  std::vector<T> read(cudaStream_t s) const {
    CUDA_OK(cudaStreamSynchronize(s));
    std::vector<T> v(n_);
    CUDA_OK(cudaMemcpy(v.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// One rank: its own device (cudaSetDevice(device)), a stream, a communicator.
class Rank {
 public:
  Rank(int rank, int world, const ncclUniqueId& id, int device) : rank_(rank), world_(world) {
    CUDA_OK(cudaSetDevice(device));
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NCCL_OK(ncclCommInitRank(&comm_, world, id, rank));
  }
  Rank(int rank, int world, const std::string& id_path) : Rank(rank, world, share_id(rank, id_path), rank) {}
  ~Rank() {
    if (comm_) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  // The communicator's asynchronous error (ncclSuccess while it works).
  ncclResult_t async_error() const {
    ncclResult_t r = ncclSuccess;
    NCCL_OK(ncclCommGetAsyncError(comm_, &r));
    return r;
  }
  // Waits until the asynchronous error is something other than ncclSuccess/ncclInProgress,
  // at most `seconds`; returns it (ncclSuccess when none came).
  ncclResult_t wait_error(double seconds) const {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      const ncclResult_t r = async_error();
      if ((r != ncclSuccess && r != ncclInProgress) || Clock::now() >= end) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void forget() { comm_ = nullptr; }  // the test aborted or destroyed it itself

 private:
  int rank_, world_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace rt::emu_test
