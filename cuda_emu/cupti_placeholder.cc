// TEMPORARY placeholder so that binaries link under --config=cuda-emu while the CUPTI fake
// is written: every call fails with CUPTI_ERROR_NOT_INITIALIZED. To be deleted by the fake.
#include <cupti.h>

CUptiResult cuptiGetResultString(CUptiResult, const char** s) {
  *s = "the CUPTI fake is not written yet (placeholder)";
  return CUPTI_SUCCESS;
}
CUptiResult cuptiGetTimestamp(uint64_t*) { return CUPTI_ERROR_NOT_INITIALIZED; }
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) { return CUPTI_ERROR_NOT_INITIALIZED; }
CUptiResult cuptiActivityEnable(CUpti_ActivityKind) { return CUPTI_ERROR_NOT_INITIALIZED; }
CUptiResult cuptiActivityDisable(CUpti_ActivityKind) { return CUPTI_ERROR_NOT_INITIALIZED; }
CUptiResult cuptiActivityFlushAll(uint32_t) { return CUPTI_ERROR_NOT_INITIALIZED; }
CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind, uint64_t) { return CUPTI_ERROR_NOT_INITIALIZED; }
CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind, uint64_t*) { return CUPTI_ERROR_NOT_INITIALIZED; }
CUptiResult cuptiActivityGetNextRecord(uint8_t*, size_t, CUpti_Activity**) { return CUPTI_ERROR_NOT_INITIALIZED; }
