// The cuDNN fake's C API surface: status names, the version, the per-thread last error,
// handles and streams, and the typed attribute store: every kind of bad cudnnBackendSetAttribute
// refused with cuDNN's status and a message naming the problem, cudnnBackendGetAttribute's
// element counts and descriptor copies (Note [Attribute statuses] in cuda_emu/cudnn_attrs.cc).
// Outside --config=cuda-emu: SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cudnn_backend.cuh"
#include "tests/cuda_emu/cudnn_test_util.h"

namespace {

using rt::cuda::detail::Desc;
using namespace cudnn_test;

Desc tensor(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(16));
  t.finalize();
  return t;
}

}  // namespace

TEST_CASE("status names, the version, and the last error: per thread, cleared when read, cut to max_size") {
  const std::pair<cudnnStatus_t, const char*> names[] = {
      {CUDNN_STATUS_SUCCESS, "CUDNN_STATUS_SUCCESS"},
      {CUDNN_STATUS_NOT_INITIALIZED, "CUDNN_STATUS_NOT_INITIALIZED"},
      {CUDNN_STATUS_BAD_PARAM, "CUDNN_STATUS_BAD_PARAM"},
      {CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "CUDNN_STATUS_BAD_PARAM_NULL_POINTER"},
      {CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED"},
      {CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE"},
      {CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE"},
      {CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"},
      {CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE, "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE"},
      {CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED, "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED"},
      {CUDNN_STATUS_EXECUTION_FAILED_CURAND, "CUDNN_STATUS_EXECUTION_FAILED_CURAND"},
      {cudnnStatus_t(2001), "CUDNN_STATUS_INVALID_VALUE"},
      // Unknown, and inside the enumeration's range (its values need 13 bits): 9999 was
      // undefined behaviour to form (UBSan under --config=cuda-emu-asan).
      {cudnnStatus_t(7777), "CUDNN_UNKNOWN_STATUS"},
  };
  for (const auto& [s, name] : names) CHECK(std::string(cudnnGetErrorString(s)) == name);
  // Every status of cudnn_graph.h (9.19) has its own name.
  const int all[] = {0, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 2000, 2002, 2003, 2004, 2005, 2006, 2007, 2008, 2009, 2010, 2011, 2012, 3000, 3001, 3002, 3003, 3004, 3005, 3006, 3007, 3008, 3009, 3010, 3011, 3012, 3013, 3014, 4000, 4001, 4002, 4003, 4004, 4005, 4006, 5000, 5001, 5002, 5003, 5004};
  std::vector<std::string> seen;
  for (int s : all) {
    const std::string n = cudnnGetErrorString(cudnnStatus_t(s));
    CHECK_MESSAGE(n.rfind("CUDNN_STATUS_", 0) == 0, s, " ", n);
    CHECK_MESSAGE(std::find(seen.begin(), seen.end(), n) == seen.end(), s, " ", n);
    seen.push_back(n);
  }
  CHECK(cudnnGetVersion() == size_t(CUDNN_VERSION));

  CHECK(cudnnBackendFinalize(nullptr) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  std::string other;
  std::thread([&] { other = last_error(); }).join();
  CHECK(other.empty());  // another thread's message is its own
  char small[6];
  cudnnGetLastErrorString(small, sizeof small);
  CHECK(std::string(small) == "cudnn");  // max_size - 1 characters
  CHECK(last_error().empty());  // reading cleared it
  CHECK(cudnnBackendFinalize(nullptr) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  Desc ok = tensor(1, {1, 2, 3, 4}, {24, 12, 4, 1});  // a successful call leaves the message
  CHECK(last_error().find("descriptor is null") != std::string::npos);
}

TEST_CASE("handles belong to the current device; streams of another device are refused") {
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudnnHandle_t h = nullptr;
  REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t s0 = nullptr, s1 = nullptr;
  REQUIRE(cudaStreamCreate(&s0) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&s1) == cudaSuccess);
  EXPECT_STATUS(cudnnSetStream(h, s0), CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, "handle belongs to cuda:1");
  CHECK(cudnnSetStream(h, s1) == CUDNN_STATUS_SUCCESS);
  cudaStream_t got = nullptr;
  CHECK(cudnnGetStream(h, &got) == CUDNN_STATUS_SUCCESS);
  CHECK(got == s1);
  EXPECT_STATUS(cudnnSetStream(nullptr, s1), CUDNN_STATUS_BAD_PARAM, "not a live handle");
  EXPECT_STATUS(cudnnCreate(nullptr), CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "handle is null");
  CHECK(cudnnDestroy(h) == CUDNN_STATUS_SUCCESS);
  EXPECT_STATUS(cudnnDestroy(h), CUDNN_STATUS_BAD_PARAM, "not a live handle");
  CHECK(cudnnDestroy(nullptr) == CUDNN_STATUS_SUCCESS);  // as cuDNN 9.19
  CHECK(cudaStreamDestroy(s1) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudaStreamDestroy(s0) == cudaSuccess);
}

TEST_CASE("cudnnBackendSetAttribute refuses what cuDNN refuses, saying what and why") {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[9] = {2, 3, 4, 5, 1, 1, 1, 1, 1};
  const float f = 1;
  EXPECT_STATUS(cudnnBackendSetAttribute(nullptr, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims),
                CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "descriptor is null");
  EXPECT_STATUS(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_INT64, 1, dims),
                CUDNN_STATUS_BAD_PARAM, "CUDNN_ATTR_CONVOLUTION_CONV_MODE is not an attribute of CUDNN_BACKEND_TENSOR");
  EXPECT_STATUS(
      cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, dims),
      CUDNN_STATUS_NOT_SUPPORTED, "does not emulate");
  EXPECT_STATUS(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_FLOAT, 4, dims),
                CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "takes CUDNN_TYPE_INT64, got CUDNN_TYPE_FLOAT");
  EXPECT_STATUS(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 9, dims),
                CUDNN_STATUS_BAD_PARAM, "takes 1 to 8 elements, got elementCount 9");
  EXPECT_STATUS(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, dims),
                CUDNN_STATUS_BAD_PARAM, "got elementCount 0");
  EXPECT_STATUS(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 2, dims),
                CUDNN_STATUS_BAD_PARAM, "takes 1 element, got elementCount 2");
  EXPECT_STATUS(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, nullptr),
                CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "arrayOfElements is null");
  const int bad_type = 99;
  EXPECT_STATUS(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &bad_type),
                CUDNN_STATUS_BAD_PARAM, "99 is not a value of CUDNN_TYPE_DATA_TYPE");

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), unfinished(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  EXPECT_STATUS(cudnnBackendSetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, unfinished.ptr()),
                CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "finalize it first");
  const Desc x = tensor(1, {1, 2, 3, 4}, {24, 12, 4, 1});
  EXPECT_STATUS(cudnnBackendSetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, x.ptr()),
                CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "must be CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR");
  const cudnnBackendDescriptor_t null_desc = nullptr;
  EXPECT_STATUS(cudnnBackendSetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &null_desc),
                CUDNN_STATUS_BAD_PARAM, "a null descriptor");
  EXPECT_STATUS(cudnnBackendSetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_INT64, 1,
                                         dims),
                CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "takes CUDNN_TYPE_FLOAT or CUDNN_TYPE_DOUBLE");
  CHECK(cudnnBackendSetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &f) ==
        CUDNN_STATUS_SUCCESS);

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnHandle_t not_a_handle = reinterpret_cast<cudnnHandle_t>(&graph);
  EXPECT_STATUS(cudnnBackendSetAttribute(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                         &not_a_handle),
                CUDNN_STATUS_BAD_PARAM, "not a live cuDNN handle");
  EXPECT_STATUS(cudnnBackendSetAttribute(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64,
                                         1, dims),
                CUDNN_STATUS_BAD_PARAM, "it cannot be set");

  // A finalized descriptor cannot change (cuDNN 9.19 answers BAD_PARAM).
  const int64_t uid = 9;
  EXPECT_STATUS(cudnnBackendSetAttribute(x.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                CUDNN_STATUS_BAD_PARAM, "is finalized and cannot change");
  // A destroyed descriptor is not one.
  cudnnBackendDescriptor_t gone = nullptr;
  REQUIRE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &gone) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendDestroyDescriptor(gone) == CUDNN_STATUS_SUCCESS);
  EXPECT_STATUS(cudnnBackendSetAttribute(gone, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                CUDNN_STATUS_BAD_PARAM, "not a live descriptor");
  EXPECT_STATUS(cudnnBackendDestroyDescriptor(gone), CUDNN_STATUS_BAD_PARAM, "not a live descriptor");
  cudnnBackendDescriptor_t matmul = nullptr;  // fused graphs take pointwise descriptors; matmuls are not emulated
  EXPECT_STATUS(cudnnBackendCreateDescriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR, &matmul), CUDNN_STATUS_NOT_SUPPORTED,
                "not emulated");
  EXPECT_STATUS(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, nullptr),
                CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "descriptor is null");
}

TEST_CASE("cudnnBackendGetAttribute: finalized only, element counts, defaults, descriptor copies") {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{2, 3, 4, 5});
  int64_t n = -1, out[8] = {};
  EXPECT_STATUS(cudnnBackendGetAttribute(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, &n, out),
                CUDNN_STATUS_NOT_INITIALIZED, "not finalized");
  const Desc x = tensor(5, {2, 3, 4, 5}, {60, 20, 5, 1});
  CHECK(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, &n, nullptr) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(n == 4);  // the attribute's count, nothing written
  CHECK(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, &n, out) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(n == 2);  // what was written
  CHECK((out[0] == 2 && out[1] == 3 && out[2] == 0));
  CHECK(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 8, &n, out) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(n == 4);
  CHECK(out[3] == 5);
  CHECK(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, nullptr, out) ==
        CUDNN_STATUS_SUCCESS);  // elementCount may be null
  CHECK(out[0] == 60);
  EXPECT_STATUS(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, 4, &n, out),
                CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "holds CUDNN_TYPE_INT64");
  EXPECT_STATUS(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, -1, &n, out),
                CUDNN_STATUS_BAD_PARAM, "requestedElementCount is -1");
  EXPECT_STATUS(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 2, &n, out),
                CUDNN_STATUS_BAD_PARAM, "has one element");
  EXPECT_STATUS(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, out),
                CUDNN_STATUS_BAD_PARAM, "is not an attribute of CUDNN_BACKEND_TENSOR_DESCRIPTOR");
  EXPECT_STATUS(cudnnBackendGetAttribute(nullptr, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, out),
                CUDNN_STATUS_BAD_PARAM, "descriptor is null");
  CHECK(cudnnBackendGetAttribute(x.get(), CUDNN_ATTR_TENSOR_VECTOR_COUNT, CUDNN_TYPE_INT64, 1, &n, out) ==
        CUDNN_STATUS_SUCCESS);
  CHECK((n == 1 && out[0] == 1));  // a default

  // Descriptor-valued attributes: a copy taken when set (the source may go), read into the
  // caller's descriptor of the same type.
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(2))
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1});
  conv.finalize();
  Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  {
    const Desc w = tensor(6, {4, 3, 3, 3}, {27, 9, 3, 1}), y = tensor(7, {2, 4, 4, 5}, {80, 20, 5, 1});
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
  }  // w and y destroyed: the operation holds copies
  op.finalize();
  Desc got(CUDNN_BACKEND_TENSOR_DESCRIPTOR), wrong(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  cudnnBackendDescriptor_t g = got.get(), wr = wrong.get();
  CHECK(cudnnBackendGetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &n, &g) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnBackendGetAttribute(got.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, out) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(out[0] == 7);
  EXPECT_STATUS(cudnnBackendGetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &wr),
                CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "the attribute holds CUDNN_BACKEND_TENSOR_DESCRIPTOR");
  // alpha and beta default to 1 and 0, held as doubles; alpha was not set here.
  double alpha = 0;
  CHECK(cudnnBackendGetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_DOUBLE, 1, &n,
                                 &alpha) == CUDNN_STATUS_SUCCESS);
  CHECK(alpha == 1.0);
  float falpha = 0;
  EXPECT_STATUS(cudnnBackendGetAttribute(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1,
                                         &n, &falpha),
                CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "holds CUDNN_TYPE_DOUBLE");
}

#else
TEST_CASE("cuDNN fake attributes") { std::printf("SKIPPED: not built with --config=cuda-emu\n"); }
#endif
