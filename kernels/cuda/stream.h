// cudaStream_t for headers that the host compiler also reads: the launchers' declarations
// name the stream type without pulling in the CUDA headers. (The same typedef as
// driver_types.h; repeating a typedef of the same type is legal C++.)
#pragma once

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
