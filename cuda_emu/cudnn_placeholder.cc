// TEMPORARY placeholder so that binaries link under --config=cuda-emu while the cuDNN fake
// is written: every call fails with CUDNN_STATUS_NOT_SUPPORTED. To be deleted by the fake.
#include <cudnn.h>

#include <cstring>

extern "C" {
size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
const char* cudnnGetErrorString(cudnnStatus_t) { return "CUDNN_STATUS_NOT_SUPPORTED (placeholder)"; }
void cudnnGetLastErrorString(char* m, size_t n) {
  if (n) std::strncpy(m, "cuda-emu: the cuDNN fake is not written yet", n - 1), m[n - 1] = 0;
}
cudnnStatus_t cudnnCreate(cudnnHandle_t*) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnDestroy(cudnnHandle_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t, const void*) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t, int64_t*, void*) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
}
