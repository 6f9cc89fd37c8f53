// The NCCL fake (cuda_emu/nccl_*) computes what NCCL computes: every collective the engine
// uses, in every type and reduction, on 2 and 3 ranks that are real processes, each on its
// own emulated device, against a host reference written from NCCL's rules (reduction in
// rank order, rounded to the type after each step, ncclAvg as NCCL's pre-multiplied sum;
// f16 and bf16 steps through the toolkit's own conversions), bit for bit; in place and
// not; a grouped send/recv ring of messages larger than a socket's buffers (which would
// deadlock outside the group); ranks as threads of one process; a non-blocking init.
// Outside --config=cuda-emu the test says SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <future>
#include <type_traits>

#include "tests/cuda_emu/nccl_test_util.h"
#include "tests/distributed/launch.h"

namespace rt::emu_test {
namespace {

using rt::dist::testing::launch;
using rt::dist::testing::LaunchOptions;

LaunchOptions within(int seconds) {
  LaunchOptions o;
  o.limit = std::chrono::seconds(seconds);
  return o;
}

// ---- the host reference ------------------------------------------------------------------------
// A type: its storage, conversions, and one step of a reduction as NCCL's kernels compute it.
template <class S, ncclDataType_t T>
struct Native {
  using Store = S;
  static constexpr ncclDataType_t type = T;
  static constexpr bool floating = std::is_floating_point_v<S>;
  static S from(double d) { return S(d); }
  static double to(S s) { return double(s); }
  static S step(ncclRedOp_t op, S a, S b) {
    if constexpr (floating) {
      switch (op) {
        case ncclProd: return a * b;
        case ncclMax: return std::fmax(a, b);
        case ncclMin: return std::fmin(a, b);
        default: return a + b;
      }
    } else {  // two's complement wrap-around, through 64 bits
      switch (op) {
        case ncclProd: return S(uint64_t(a) * uint64_t(b));
        case ncclMax: return a > b ? a : b;
        case ncclMin: return a < b ? a : b;
        default: return S(uint64_t(a) + uint64_t(b));
      }
    }
  }
};

// f16 and bf16: each step in float, rounded by the toolkit's conversion (as __hadd does).
template <class S, ncclDataType_t T, float (*ToF)(S), S (*FromF)(float)>
struct Narrow {
  using Store = S;
  static constexpr ncclDataType_t type = T;
  static constexpr bool floating = true;
  static S from(double d) { return FromF(float(d)); }
  static double to(S s) { return ToF(s); }
  static S step(ncclRedOp_t op, S a, S b) {
    const float x = ToF(a), y = ToF(b);
    switch (op) {
      case ncclProd: return FromF(x * y);
      case ncclMax: return FromF(std::fmax(x, y));
      case ncclMin: return FromF(std::fmin(x, y));
      default: return FromF(x + y);
    }
  }
};
float h2f(__half h) { return __half2float(h); }
__half f2h(float f) { return __float2half_rn(f); }
float b2f(__nv_bfloat16 b) { return __bfloat162float(b); }
__nv_bfloat16 f2b(float f) { return __float2bfloat16_rn(f); }
using Half = Narrow<__half, ncclFloat16, h2f, f2h>;
using BF16 = Narrow<__nv_bfloat16, ncclBfloat16, b2f, f2b>;

// Rank r's input element i: non-integers for floating types (so that rounding matters),
// small values for products (integer products still wrap in 8 bits).
template <class Tr>
typename Tr::Store input(int rank, size_t i, ncclRedOp_t op) {
  const int k = int((rank * 131 + i * 17) % 97);
  if (op == ncclProd) return Tr::from(Tr::floating ? 0.75 + (k % 11) * 0.05 : double(1 + k % 13));
  if (Tr::floating) return Tr::from(k * 0.173 - 8.1);
  return Tr::from(std::is_signed_v<typename Tr::Store> ? k - 48 : k);
}

// NCCL's rule: rank order, a step at a time; ncclAvg pre-multiplies floating inputs by 1/N
// (rounded to the type through float) and divides integer sums.
template <class Tr>
typename Tr::Store reduce_ref(ncclRedOp_t op, int world, size_t i, size_t offset = 0) {
  using S = typename Tr::Store;
  const S scale = Tr::from(double(float(1.0 / world)));
  const S scale_d = Tr::from(1.0 / world);  // f64 rounds 1/N to double only
  auto pre = [&](S v) {
    if (op != ncclAvg || !Tr::floating) return v;
    return Tr::step(ncclProd, v, Tr::type == ncclFloat64 ? scale_d : scale);
  };
  S acc = pre(input<Tr>(0, offset + i, op));
  for (int r = 1; r < world; ++r) acc = Tr::step(op, acc, pre(input<Tr>(r, offset + i, op)));
  if constexpr (!Tr::floating)
    if (op == ncclAvg) acc = S(std::is_signed_v<S> ? int64_t(acc) / world : int64_t(uint64_t(acc) / uint64_t(world)));
  return acc;
}

template <class S>
void expect_same(const std::vector<S>& got, size_t i, const S& want, double got_d, double want_d, const std::string& what) {
  expect(std::memcmp(&got[i], &want, sizeof(S)) == 0, what, ": element ", i, " is ", got_d, ", expected ", want_d);
}

// ---- the collectives on one rank ----------------------------------------------------------------
template <class Tr>
void all_reduce_every_op(const Rank& R) {
  using S = typename Tr::Store;
  const size_t n = 1001;
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg})
    for (bool in_place : {false, true}) {
      std::vector<S> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = input<Tr>(R.rank(), i, op);
      DeviceVec<S> send(x), out(n);
      S* result = in_place ? send.get() : out.get();
      NCCL_OK(ncclAllReduce(send.get(), result, n, Tr::type, op, R.comm(), R.stream()));
      const std::vector<S> got = (in_place ? send : out).read(R.stream());
      for (size_t i = 0; i < n; ++i) {
        const S want = reduce_ref<Tr>(op, R.world(), i);
        expect_same(got, i, want, Tr::to(got[i]), Tr::to(want),
                    cat("rank ", R.rank(), ": ncclAllReduce type ", int(Tr::type), " op ", int(op),
                        in_place ? " in place" : ""));
      }
    }
}

template <class Tr>
void reduce_scatter(const Rank& R) {
  using S = typename Tr::Store;
  const size_t n = 257;  // per rank
  const size_t w = size_t(R.world());
  for (ncclRedOp_t op : {ncclSum, ncclMax, ncclAvg})
    for (bool in_place : {false, true}) {
      std::vector<S> x(n * w);
      for (size_t i = 0; i < n * w; ++i) x[i] = input<Tr>(R.rank(), i, op);
      DeviceVec<S> send(x), out(n);
      S* result = in_place ? send.get() + size_t(R.rank()) * n : out.get();
      NCCL_OK(ncclReduceScatter(send.get(), result, n, Tr::type, op, R.comm(), R.stream()));
      std::vector<S> got = (in_place ? send : out).read(R.stream());
      if (in_place) got = std::vector<S>(got.begin() + long(size_t(R.rank()) * n), got.begin() + long(size_t(R.rank() + 1) * n));
      for (size_t i = 0; i < n; ++i) {
        const S want = reduce_ref<Tr>(op, R.world(), i, size_t(R.rank()) * n);
        expect_same(got, i, want, Tr::to(got[i]), Tr::to(want),
                    cat("rank ", R.rank(), ": ncclReduceScatter type ", int(Tr::type), " op ", int(op),
                        in_place ? " in place" : ""));
      }
    }
}

// A NaN loses against a number in ncclMax / ncclMin (fmaxf, __hmax), and stays when alone.
template <class Tr>
void nan_in_max_and_min(const Rank& R) {
  using S = typename Tr::Store;
  const double nan = std::nan("");
  for (ncclRedOp_t op : {ncclMax, ncclMin}) {
    // element 0: NaN on rank 0 only; element 1: NaN on every rank.
    std::vector<S> x = {Tr::from(R.rank() == 0 ? nan : 1.5 + R.rank()), Tr::from(nan)};
    DeviceVec<S> buf(x);
    NCCL_OK(ncclAllReduce(buf.get(), buf.get(), 2, Tr::type, op, R.comm(), R.stream()));
    const std::vector<S> got = buf.read(R.stream());
    const double want0 = op == ncclMax ? 1.5 + (R.world() - 1) : 2.5;
    expect(Tr::to(got[0]) == want0, "rank ", R.rank(), ": NaN in op ", int(op), " type ", int(Tr::type), ": ",
           Tr::to(got[0]), ", expected ", want0);
    expect(std::isnan(Tr::to(got[1])), "rank ", R.rank(), ": all-NaN op ", int(op), " gave ", Tr::to(got[1]));
  }
}

void all_gather_and_broadcast(const Rank& R) {
  const size_t n = 333, w = size_t(R.world());
  auto value = [](int rank, size_t i) { return double(rank * 1000 + int(i)) + 0.25; };
  for (bool in_place : {false, true}) {
    std::vector<double> mine(n), all(n * w);
    for (size_t i = 0; i < n; ++i) mine[i] = value(R.rank(), i);
    DeviceVec<double> send(mine), out(n * w);
    if (in_place) CUDA_OK(cudaMemcpy(out.get() + size_t(R.rank()) * n, mine.data(), n * sizeof(double), cudaMemcpyHostToDevice));
    const double* src = in_place ? out.get() + size_t(R.rank()) * n : send.get();
    NCCL_OK(ncclAllGather(src, out.get(), n, ncclFloat64, R.comm(), R.stream()));
    const std::vector<double> got = out.read(R.stream());
    for (size_t r = 0; r < w; ++r)
      for (size_t i = 0; i < n; ++i)
        expect(got[r * n + i] == value(int(r), i), "rank ", R.rank(), ": ncclAllGather", in_place ? " in place" : "",
               " chunk ", r, " element ", i, " is ", got[r * n + i]);
  }
  // Broadcast from every root, as bytes (what the engine sends) and in place or not.
  for (int root = 0; root < R.world(); ++root)
    for (bool in_place : {false, true}) {
      std::vector<uint8_t> x(4099);
      for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t(i * 7 + size_t(R.rank()) * 13);
      DeviceVec<uint8_t> send(x), out(x.size());
      CUDA_OK(cudaMemset(out.get(), 0xee, out.bytes()));
      // Non-roots pass no sendbuff when not in place: NCCL reads it on the root only.
      const void* src = in_place ? out.get() : R.rank() == root ? send.get() : nullptr;
      if (in_place && R.rank() == root) CUDA_OK(cudaMemcpy(out.get(), x.data(), x.size(), cudaMemcpyHostToDevice));
      NCCL_OK(ncclBroadcast(src, out.get(), x.size(), ncclInt8, root, R.comm(), R.stream()));
      const std::vector<uint8_t> got = out.read(R.stream());
      for (size_t i = 0; i < x.size(); ++i)
        expect(got[i] == uint8_t(i * 7 + size_t(root) * 13), "rank ", R.rank(), ": ncclBroadcast from root ", root,
               in_place ? " in place" : "", " byte ", i, " is ", int(got[i]));
    }
}

// Each rank sends 3 MB to the next and receives from the one before, in one group: more
// than a socket buffers, so only a group (sends and receives moving together) completes.
// The group also holds a transfer to itself and spans two streams.
void grouped_ring(const Rank& R) {
  const int w = R.world(), next = (R.rank() + 1) % w, prev = (R.rank() + w - 1) % w;
  const size_t n = 3 << 20;
  std::vector<uint8_t> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = uint8_t(i * 31 + size_t(R.rank()));
  DeviceVec<uint8_t> send(x), from_prev(n), self(64);
  cudaStream_t other;
  CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(send.get(), n, ncclUint8, next, R.comm(), R.stream()));
  NCCL_OK(ncclRecv(from_prev.get(), n, ncclUint8, prev, R.comm(), other));
  NCCL_OK(ncclSend(send.get(), 64, ncclUint8, R.rank(), R.comm(), R.stream()));
  NCCL_OK(ncclRecv(self.get(), 64, ncclUint8, R.rank(), R.comm(), R.stream()));
  NCCL_OK(ncclGroupEnd());
  const std::vector<uint8_t> got = from_prev.read(other);  // the group's streams joined: `other` saw it end
  for (size_t i = 0; i < n; ++i)
    expect(got[i] == uint8_t(i * 31 + size_t(prev)), "rank ", R.rank(), ": byte ", i, " from rank ", prev, " is ",
           int(got[i]));
  const std::vector<uint8_t> to_self = self.read(R.stream());
  expect(std::memcmp(to_self.data(), x.data(), 64) == 0, "rank ", R.rank(), ": the transfer to itself differs");
  CUDA_OK(cudaStreamDestroy(other));
}

void every_collective(const Rank& R) {
  int count = 0, device = -1, rank = -1;
  NCCL_OK(ncclCommCount(R.comm(), &count));
  NCCL_OK(ncclCommCuDevice(R.comm(), &device));
  NCCL_OK(ncclCommUserRank(R.comm(), &rank));
  expect(count == R.world() && device == R.rank() && rank == R.rank(), "rank ", R.rank(), ": count ", count,
         " device ", device, " rank ", rank);
  all_reduce_every_op<Native<float, ncclFloat32>>(R);
  all_reduce_every_op<Native<double, ncclFloat64>>(R);
  all_reduce_every_op<Half>(R);
  all_reduce_every_op<BF16>(R);
  all_reduce_every_op<Native<int32_t, ncclInt32>>(R);
  all_reduce_every_op<Native<int64_t, ncclInt64>>(R);
  all_reduce_every_op<Native<uint32_t, ncclUint32>>(R);
  all_reduce_every_op<Native<uint64_t, ncclUint64>>(R);
  all_reduce_every_op<Native<int8_t, ncclInt8>>(R);
  all_reduce_every_op<Native<uint8_t, ncclUint8>>(R);
  reduce_scatter<Native<float, ncclFloat32>>(R);
  reduce_scatter<Native<double, ncclFloat64>>(R);
  reduce_scatter<Half>(R);
  reduce_scatter<BF16>(R);
  nan_in_max_and_min<Native<float, ncclFloat32>>(R);
  nan_in_max_and_min<Half>(R);
  nan_in_max_and_min<BF16>(R);
  all_gather_and_broadcast(R);
  grouped_ring(R);
  // An empty call queues nothing, as in NCCL.
  NCCL_OK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, R.comm(), R.stream()));
}

}  // namespace

TEST_CASE("nccl fake: every collective, type and reduction equals the host reference on 2 and 3 processes") {
  for (int world : {2, 3}) {
    const std::string id = fresh_path("id");
    const auto r = launch(
        world,
        [&](int rank) {
          Rank R(rank, world, id);
          every_collective(R);
          NCCL_OK(ncclCommFinalize(R.comm()));
          return 0;
        },
        within(120));
    CHECK_MESSAGE(r.ok(), r.report());
  }
}

TEST_CASE("nccl fake: ranks as threads of one process, each on its own device") {
  const auto r = launch(
      1,
      [](int) {
        const int world = 3;
        std::promise<ncclUniqueId> made;
        std::shared_future<ncclUniqueId> id = made.get_future().share();
        std::vector<std::future<void>> ranks;
        for (int rank = 0; rank < world; ++rank)
          ranks.push_back(std::async(std::launch::async, [&, rank] {
            if (rank == 0) {
              ncclUniqueId u;
              NCCL_OK(ncclGetUniqueId(&u));
              made.set_value(u);
            }
            Rank R(rank, world, id.get(), rank);
            all_reduce_every_op<Native<float, ncclFloat32>>(R);
            grouped_ring(R);
          }));
        for (auto& f : ranks) f.get();  // rethrows a rank's failure
        return 0;
      },
      within(60));
  CHECK_MESSAGE(r.ok(), r.report());
}

TEST_CASE("nccl fake: a non-blocking init reports ncclInProgress until every rank has joined") {
  const std::string id = fresh_path("id"), joined = fresh_path("joined");
  const auto r = launch(
      2,
      [&](int rank) {
        CUDA_OK(cudaSetDevice(rank));
        const ncclUniqueId u = share_id(rank, id);
        if (rank == 1) expect(wait_file(joined, 30), "rank 0 never said it started");
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t comm = nullptr;
        const ncclResult_t init = ncclCommInitRankConfig(&comm, 2, u, rank, &config);
        expect(init == ncclInProgress && comm, "rank ", rank, ": non-blocking init returned ", ncclGetErrorString(init));
        ncclResult_t st = ncclSuccess;
        if (rank == 0) {
          // Rank 1 has not called init yet: the setup cannot be complete.
          NCCL_OK(ncclCommGetAsyncError(comm, &st));
          expect(st == ncclInProgress, "rank 0: async error ", ncclGetErrorString(st), " before rank 1 joined");
          DeviceVec<float> x(std::vector<float>{1, 2});
          const ncclResult_t early = ncclAllReduce(x.get(), x.get(), 2, ncclFloat32, ncclSum, comm, nullptr);
          expect(early == ncclInvalidArgument, "a call during the setup returned ", ncclGetErrorString(early));
          signal_file(joined);
        }
        const auto start = Clock::now();
        do {
          NCCL_OK(ncclCommGetAsyncError(comm, &st));
        } while (st == ncclInProgress && seconds_since(start) < 30);
        expect(st == ncclSuccess, "rank ", rank, ": setup ended with ", ncclGetErrorString(st), ": ",
               ncclGetLastError(comm));
        DeviceVec<float> x(std::vector<float>{float(rank), 10});
        NCCL_OK(ncclAllReduce(x.get(), x.get(), 2, ncclFloat32, ncclSum, comm, nullptr));
        const std::vector<float> got = x.read(nullptr);
        expect(got[0] == 1 && got[1] == 20, "rank ", rank, ": sum ", got[0], ", ", got[1]);
        const ncclResult_t fin = ncclCommFinalize(comm);
        expect(fin == ncclInProgress || fin == ncclSuccess, "finalize returned ", ncclGetErrorString(fin));
        do {
          NCCL_OK(ncclCommGetAsyncError(comm, &st));
        } while (st == ncclInProgress && seconds_since(start) < 30);
        expect(st == ncclSuccess, "rank ", rank, ": finalize ended with ", ncclGetErrorString(st));
        NCCL_OK(ncclCommDestroy(comm));
        return 0;
      },
      within(60));
  CHECK_MESSAGE(r.ok(), r.report());
}

}  // namespace rt::emu_test

#else

TEST_CASE("nccl fake") { std::printf("SKIPPED: the NCCL fake runs under --config=cuda-emu\n"); }

#endif
