// Statuses and error messages of the cuDNN fake (--config=cuda-emu): every failing call sets
// the calling thread's message that cudnnGetLastErrorString returns, as cuDNN does.
#pragma once

#include <cudnn.h>

#include <string>

namespace rt::emu::cudnn {

// Records `message` as the thread's last error (prefixed with the API function `where`) and
// returns `status`, so that a failing call reads `return fail(...)`.
cudnnStatus_t fail(cudnnStatus_t status, const char* where, const std::string& message);

// "CUDNN_STATUS_BAD_PARAM_NULL_POINTER", ...; "CUDNN_UNKNOWN_STATUS" for other values.
const char* status_name(cudnnStatus_t s);

}  // namespace rt::emu::cudnn
