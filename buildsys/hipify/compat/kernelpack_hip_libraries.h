// kernelpack's prelude to the rocPRIM-based header libraries (rocThrust, hipCUB, rocPRIM): the
// translator includes it just before a translated file's first include of thrust/, hipcub/ or
// rocprim/, so the macro state it sees is the one the library would see.
//
// gfx950 (MI350) in rocPRIM 3.4 (ROCm 6.4): config.hpp lists no gfx950, so the device pass marks
// the target unknown (`#warning "unknown build target"`); its unknown-target clause tests a
// misspelt macro (ROCPRIM_TARGET_UKNOWN), so ROCPRIM_MAX_ATOMIC_SIZE stays 16, as in the host pass,
// and intrinsics/atomic.hpp's 128-bit atomic_load/atomic_store (the packed flag-and-value words of
// the look-back scan) find no instruction sequence: `#error support for 128-bit atomics not
// implemented`, in every file that includes rocThrust, hipCUB or rocPRIM. gfx950 has gfx942's
// memory model (LLVM AMDGPUUsage, "Memory Model GFX942": GFX942 and GFX950; the compiler emits the
// same sc1 bit for an agent-scope relaxed atomic on both, which tests/test_toolchain_libraries.py
// checks), so it gets the CDNA3 sequences: rocPRIM's own later releases do the same. Only the
// 128-bit atomics read ROCPRIM_TARGET_CDNA3; the tuning tables still see gfx950 as unknown on host
// and device alike. On every other target, and when rocPRIM knows gfx950, this header is empty.
#pragma once

#if defined(__HIP_DEVICE_COMPILE__) && defined(__gfx950__) && defined(__has_include)
#if __has_include(<rocprim/config.hpp>)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-W#warnings"
#include <rocprim/config.hpp>
#pragma clang diagnostic pop
#if defined(ROCPRIM_TARGET_UNKNOWN) && ROCPRIM_MAX_ATOMIC_SIZE == 16
#undef ROCPRIM_TARGET_UNKNOWN
#define ROCPRIM_TARGET_CDNA3 1
#endif
#endif
#endif
