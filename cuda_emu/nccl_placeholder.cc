// TEMPORARY placeholder so that binaries link under --config=cuda-emu while the NCCL fake is
// written: every call fails with ncclInternalError. To be deleted by the fake.
#include <nccl.h>

ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclInternalError; }
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) { return ncclInternalError; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*) { return ncclInternalError; }
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclInternalError; }
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclInternalError; }
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclInternalError; }
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInternalError; }
ncclResult_t ncclGroupStart() { return ncclInternalError; }
ncclResult_t ncclGroupEnd() { return ncclInternalError; }
ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
const char* ncclGetErrorString(ncclResult_t) { return "the NCCL fake is not written yet (placeholder)"; }
const char* ncclGetLastError(ncclComm_t) { return "the NCCL fake is not written yet (placeholder)"; }
