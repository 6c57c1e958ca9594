"""CUDA-to-HIP mapping tables: data only, no translation logic.

Each renaming table below is a block of lines, one CUDA name per line, optionally followed by its
HIP name. A line with one name takes the HIP name by the prefix rule (``cuda``/``cu`` -> ``hip``,
``CUDA_``/``CU_`` -> ``HIP_``), which is how most of HIP's API was named; a line with two names is an
exception to the rule. The block's key is the kind the statistics count the reference under.

Every HIP name in the tables whose header ships with HIP itself is checked against the provisioned
HIP headers by tests/test_hipify_toolchain.py, so a misspelt or removed name fails a test rather
than a user's compile. Library prefixes (cuBLAS -> hipBLAS, ...) name headers that are not part of
the HIP toolchain; those are translated by name only.

Warp-level intrinsics are not renamed here: their translation drops or checks arguments, so it
lives in translate.py. This module only lists them (WARP_INTRINSICS) with the position of the mask
argument, and explains the chosen translation where the data is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUNTIME_BLOCKS: dict[str, str] = {
    "error": """
        cudaGetLastError
        cudaPeekAtLastError
        cudaGetErrorString
        cudaGetErrorName
        cudaError_t
        cudaError hipError_t
        cudaSuccess
        cudaErrorInvalidValue
        cudaErrorMemoryAllocation hipErrorOutOfMemory
        cudaErrorInitializationError hipErrorNotInitialized
        cudaErrorNotReady
        cudaErrorInvalidDevice
        cudaErrorInvalidDevicePointer
        cudaErrorInvalidMemcpyDirection
        cudaErrorInvalidConfiguration
        cudaErrorInvalidSymbol
        cudaErrorInvalidResourceHandle hipErrorInvalidHandle
        cudaErrorLaunchFailure
        cudaErrorLaunchOutOfResources
        cudaErrorLaunchTimeout hipErrorLaunchTimeOut
        cudaErrorNoDevice
        cudaErrorNotSupported
        cudaErrorUnknown
        cudaErrorIllegalAddress
        cudaErrorInvalidKernelImage hipErrorInvalidImage
        cudaErrorMissingConfiguration
        cudaErrorInsufficientDriver
        cudaErrorPeerAccessAlreadyEnabled
        cudaErrorPeerAccessNotEnabled
        cudaErrorHostMemoryAlreadyRegistered
        cudaErrorHostMemoryNotRegistered
        cudaErrorCooperativeLaunchTooLarge
        cudaErrorAssert
        cudaErrorSymbolNotFound hipErrorNotFound
        cudaErrorContextIsDestroyed
        cudaErrorStreamCaptureUnsupported
    """,
    "device": """
        cudaGetDeviceCount
        cudaGetDevice
        cudaSetDevice
        cudaSetDeviceFlags
        cudaGetDeviceFlags
        cudaChooseDevice
        cudaGetDeviceProperties
        cudaDeviceProp hipDeviceProp_t
        cudaDeviceGetAttribute
        cudaDeviceAttr hipDeviceAttribute_t
        cudaDevAttrMaxThreadsPerBlock hipDeviceAttributeMaxThreadsPerBlock
        cudaDevAttrMaxBlockDimX hipDeviceAttributeMaxBlockDimX
        cudaDevAttrMaxBlockDimY hipDeviceAttributeMaxBlockDimY
        cudaDevAttrMaxBlockDimZ hipDeviceAttributeMaxBlockDimZ
        cudaDevAttrMaxGridDimX hipDeviceAttributeMaxGridDimX
        cudaDevAttrMaxGridDimY hipDeviceAttributeMaxGridDimY
        cudaDevAttrMaxGridDimZ hipDeviceAttributeMaxGridDimZ
        cudaDevAttrMaxSharedMemoryPerBlock hipDeviceAttributeMaxSharedMemoryPerBlock
        cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
        cudaDevAttrTotalConstantMemory hipDeviceAttributeTotalConstantMemory
        cudaDevAttrWarpSize hipDeviceAttributeWarpSize
        cudaDevAttrMaxRegistersPerBlock hipDeviceAttributeMaxRegistersPerBlock
        cudaDevAttrClockRate hipDeviceAttributeClockRate
        cudaDevAttrMemoryClockRate hipDeviceAttributeMemoryClockRate
        cudaDevAttrGlobalMemoryBusWidth hipDeviceAttributeMemoryBusWidth
        cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
        cudaDevAttrComputeMode hipDeviceAttributeComputeMode
        cudaDevAttrMemoryPoolsSupported hipDeviceAttributeMemoryPoolsSupported
        cudaComputeModeProhibited
        cudaComputeModeDefault
        cudaDevAttrL2CacheSize hipDeviceAttributeL2CacheSize
        cudaDevAttrMaxThreadsPerMultiProcessor hipDeviceAttributeMaxThreadsPerMultiProcessor
        cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
        cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
        cudaDevAttrConcurrentKernels hipDeviceAttributeConcurrentKernels
        cudaDevAttrPciBusId hipDeviceAttributePciBusId
        cudaDevAttrPciDeviceId hipDeviceAttributePciDeviceId
        cudaDevAttrIntegrated hipDeviceAttributeIntegrated
        cudaDevAttrManagedMemory hipDeviceAttributeManagedMemory
        cudaDevAttrCooperativeLaunch hipDeviceAttributeCooperativeLaunch
        cudaDevAttrMaxSharedMemoryPerMultiprocessor hipDeviceAttributeMaxSharedMemoryPerMultiprocessor
        cudaDeviceSynchronize
        cudaThreadSynchronize hipDeviceSynchronize
        cudaDeviceReset
        cudaDeviceSetCacheConfig
        cudaDeviceGetCacheConfig
        cudaDeviceSetLimit
        cudaDeviceGetLimit
        cudaLimit hipLimit_t
        cudaLimitStackSize
        cudaLimitPrintfFifoSize
        cudaLimitMallocHeapSize
        cudaDeviceGetPCIBusId
        cudaDeviceGetByPCIBusId
        cudaDeviceGetStreamPriorityRange
        cudaDeviceScheduleAuto
        cudaDeviceScheduleSpin
        cudaDeviceScheduleYield
        cudaDeviceScheduleBlockingSync
        cudaDeviceMapHost
        cudaDeviceLmemResizeToMax
        cudaFuncCache hipFuncCache_t
        cudaFuncCachePreferNone
        cudaFuncCachePreferShared
        cudaFuncCachePreferL1
        cudaFuncCachePreferEqual
        cudaDriverGetVersion
        cudaRuntimeGetVersion
    """,
    "peer": """
        cudaDeviceCanAccessPeer
        cudaDeviceEnablePeerAccess
        cudaDeviceDisablePeerAccess
        cudaMemcpyPeer
        cudaMemcpyPeerAsync
    """,
    "memory": """
        cudaMalloc
        cudaFree
        cudaMallocManaged
        cudaMallocPitch
        cudaMallocHost hipHostMalloc
        cudaFreeHost hipHostFree
        cudaHostAlloc hipHostMalloc
        cudaHostAllocDefault hipHostMallocDefault
        cudaHostAllocPortable hipHostMallocPortable
        cudaHostAllocMapped hipHostMallocMapped
        cudaHostAllocWriteCombined hipHostMallocWriteCombined
        cudaHostRegister
        cudaHostUnregister
        cudaHostRegisterDefault
        cudaHostRegisterPortable
        cudaHostRegisterMapped
        cudaHostGetDevicePointer
        cudaMemcpy
        cudaMemcpyAsync
        cudaMemcpy2D
        cudaMemcpy2DAsync
        cudaMemcpyToSymbol
        cudaMemcpyToSymbolAsync
        cudaMemcpyFromSymbol
        cudaMemcpyFromSymbolAsync
        cudaGetSymbolAddress
        cudaGetSymbolSize
        cudaMemcpyKind hipMemcpyKind
        cudaMemcpyHostToHost
        cudaMemcpyHostToDevice
        cudaMemcpyDeviceToHost
        cudaMemcpyDeviceToDevice
        cudaMemcpyDefault
        cudaMemset
        cudaMemsetAsync
        cudaMemset2D
        cudaMemGetInfo
        cudaMemPrefetchAsync
        cudaMemAdvise
        cudaMemAdviseSetReadMostly
        cudaMemAdviseSetPreferredLocation
        cudaMemAdviseSetAccessedBy
        cudaMemAttachGlobal
        cudaMemAttachHost
        cudaCpuDeviceId
        cudaMallocAsync
        cudaFreeAsync
        cudaMemPool_t
        cudaDeviceGetDefaultMemPool
        cudaMemPoolSetAttribute
        cudaMemPoolGetAttribute
        cudaMemPoolAttrReleaseThreshold
        cudaPointerGetAttributes
        cudaPointerAttributes hipPointerAttribute_t
        cudaMemoryType
        cudaMemoryTypeHost
        cudaMemoryTypeDevice
        cudaMemoryTypeManaged
    """,
    "stream": """
        cudaStream_t
        cudaStreamCreate
        cudaStreamCreateWithFlags
        cudaStreamCreateWithPriority
        cudaStreamDestroy
        cudaStreamSynchronize
        cudaStreamQuery
        cudaStreamWaitEvent
        cudaStreamAddCallback
        cudaStreamCallback_t
        cudaStreamGetFlags
        cudaStreamGetPriority
        cudaStreamDefault
        cudaStreamNonBlocking
        cudaStreamPerThread
        cudaLaunchHostFunc hipLaunchHostFunc
        cudaHostFn_t
    """,
    "graph": """
        cudaGraph_t
        cudaGraphExec_t
        cudaStreamBeginCapture
        cudaStreamEndCapture
        cudaStreamCaptureModeGlobal
        cudaStreamCaptureModeThreadLocal
        cudaStreamCaptureModeRelaxed
        cudaGraphInstantiate
        cudaGraphLaunch
        cudaGraphDestroy
        cudaGraphExecDestroy
    """,
    "event": """
        cudaEvent_t
        cudaEventCreate
        cudaEventCreateWithFlags
        cudaEventRecord
        cudaEventSynchronize
        cudaEventQuery
        cudaEventElapsedTime
        cudaEventDestroy
        cudaEventDefault
        cudaEventBlockingSync
        cudaEventDisableTiming
        cudaEventInterprocess
    """,
    "execution": """
        cudaLaunchKernel
        cudaLaunchCooperativeKernel
        cudaFuncSetAttribute
        cudaFuncGetAttributes
        cudaFuncSetCacheConfig
        cudaFuncAttributes
        cudaFuncAttribute
        cudaFuncAttributeMaxDynamicSharedMemorySize
        cudaFuncAttributePreferredSharedMemoryCarveout
    """,
    "occupancy": """
        cudaOccupancyMaxActiveBlocksPerMultiprocessor
        cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
        cudaOccupancyMaxPotentialBlockSize
    """,
    "texture": """
        cudaTextureObject_t
        cudaSurfaceObject_t
        cudaResourceDesc
        cudaTextureDesc
        cudaResourceViewDesc
        cudaCreateTextureObject
        cudaDestroyTextureObject
        cudaCreateSurfaceObject
        cudaDestroySurfaceObject
        cudaChannelFormatDesc
        cudaCreateChannelDesc
        cudaChannelFormatKindFloat
        cudaChannelFormatKindSigned
        cudaChannelFormatKindUnsigned
        cudaArray_t
        cudaArray hipArray
        cudaMallocArray
        cudaFreeArray
        cudaMemcpy2DToArray
        cudaResourceTypeArray
        cudaResourceTypeLinear
        cudaResourceTypePitch2D
        cudaAddressModeClamp
        cudaAddressModeWrap
        cudaAddressModeBorder
        cudaAddressModeMirror
        cudaFilterModePoint
        cudaFilterModeLinear
        cudaReadModeElementType
        cudaReadModeNormalizedFloat
    """,
    "profiler": """
        cudaProfilerStart
        cudaProfilerStop
    """,
    "type": """
        cudaDataType hipDataType
        cudaDataType_t hipDataType
    """,
    # library_types.h's data types (hip/library_types.h gives each the value CUDA's has; tested
    # against both headers): what cuBLAS's Ex calls, cuBLASLt and cuSPARSE take as element types.
    "library_type": """
        CUDA_R_16F
        CUDA_C_16F
        CUDA_R_16BF
        CUDA_C_16BF
        CUDA_R_32F
        CUDA_C_32F
        CUDA_R_64F
        CUDA_C_64F
        CUDA_R_4I
        CUDA_C_4I
        CUDA_R_4U
        CUDA_C_4U
        CUDA_R_8I
        CUDA_C_8I
        CUDA_R_8U
        CUDA_C_8U
        CUDA_R_16I
        CUDA_C_16I
        CUDA_R_16U
        CUDA_C_16U
        CUDA_R_32I
        CUDA_C_32I
        CUDA_R_32U
        CUDA_C_32U
        CUDA_R_64I
        CUDA_C_64I
        CUDA_R_64U
        CUDA_C_64U
        CUDA_R_8F_E4M3
        CUDA_R_8F_E5M2
    """,
    # cuBLAS's Ex API takes library_types.h's cudaDataType and cublasComputeType_t. hipBLAS 2.x
    # declares hipblas<Name>Ex with its own deprecated hipblasDatatype_t (no matching function
    # for HIP_R_16F) and hipblas<Name>Ex_v2 with hipDataType and hipblasComputeType_t, which
    # -DHIPBLAS_V2 selects by macro (hipblas.h's own #define table, which the test reads): the
    # translation names the _v2 function, so no macro state is needed. cuBLAS's algorithm hints
    # (CUBLAS_GEMM_DEFAULT_TENSOR_OP, CUBLAS_GEMM_ALGO<n>) have no hipBLAS counterpart: the
    # default algorithm is the one hipBLAS has.
    "blas": """
        cublasGemmEx hipblasGemmEx_v2
        cublasGemmBatchedEx hipblasGemmBatchedEx_v2
        cublasGemmStridedBatchedEx hipblasGemmStridedBatchedEx_v2
        cublasGemmEx_64 hipblasGemmEx_v2_64
        cublasGemmBatchedEx_64 hipblasGemmBatchedEx_v2_64
        cublasGemmStridedBatchedEx_64 hipblasGemmStridedBatchedEx_v2_64
        cublasAxpyEx hipblasAxpyEx_v2
        cublasAxpyEx_64 hipblasAxpyEx_v2_64
        cublasDotEx hipblasDotEx_v2
        cublasDotEx_64 hipblasDotEx_v2_64
        cublasDotcEx hipblasDotcEx_v2
        cublasDotcEx_64 hipblasDotcEx_v2_64
        cublasNrm2Ex hipblasNrm2Ex_v2
        cublasNrm2Ex_64 hipblasNrm2Ex_v2_64
        cublasRotEx hipblasRotEx_v2
        cublasRotEx_64 hipblasRotEx_v2_64
        cublasScalEx hipblasScalEx_v2
        cublasScalEx_64 hipblasScalEx_v2_64
        cublasComputeType_t hipblasComputeType_t
        CUBLAS_COMPUTE_16F HIPBLAS_COMPUTE_16F
        CUBLAS_COMPUTE_16F_PEDANTIC HIPBLAS_COMPUTE_16F_PEDANTIC
        CUBLAS_COMPUTE_32F HIPBLAS_COMPUTE_32F
        CUBLAS_COMPUTE_32F_PEDANTIC HIPBLAS_COMPUTE_32F_PEDANTIC
        CUBLAS_COMPUTE_32F_FAST_16F HIPBLAS_COMPUTE_32F_FAST_16F
        CUBLAS_COMPUTE_32F_FAST_16BF HIPBLAS_COMPUTE_32F_FAST_16BF
        CUBLAS_COMPUTE_32F_FAST_TF32 HIPBLAS_COMPUTE_32F_FAST_TF32
        CUBLAS_COMPUTE_64F HIPBLAS_COMPUTE_64F
        CUBLAS_COMPUTE_64F_PEDANTIC HIPBLAS_COMPUTE_64F_PEDANTIC
        CUBLAS_COMPUTE_32I HIPBLAS_COMPUTE_32I
        CUBLAS_COMPUTE_32I_PEDANTIC HIPBLAS_COMPUTE_32I_PEDANTIC
        cublasGemmAlgo_t hipblasGemmAlgo_t
        CUBLAS_GEMM_DEFAULT HIPBLAS_GEMM_DEFAULT
        CUBLAS_GEMM_DFALT HIPBLAS_GEMM_DEFAULT
        CUBLAS_GEMM_DEFAULT_TENSOR_OP HIPBLAS_GEMM_DEFAULT
        CUBLAS_GEMM_DFALT_TENSOR_OP HIPBLAS_GEMM_DEFAULT
    """,
    "driver": """
        cuInit
        cuDriverGetVersion
        cuDeviceGet
        cuDeviceGetCount hipGetDeviceCount
        cuDeviceGetName
        cuDeviceGetAttribute
        cuDeviceComputeCapability
        cuDeviceTotalMem
        cuDevicePrimaryCtxRetain
        cuDevicePrimaryCtxRelease
        cuCtxCreate
        cuCtxDestroy
        cuCtxSetCurrent
        cuCtxGetCurrent
        cuCtxSynchronize
        cuModuleLoad
        cuModuleLoadData
        cuModuleLoadDataEx
        cuModuleGetFunction
        cuModuleGetGlobal
        cuModuleUnload
        cuLaunchKernel hipModuleLaunchKernel
        cuLaunchCooperativeKernel hipModuleLaunchCooperativeKernel
        cuFuncGetAttribute
        cuOccupancyMaxActiveBlocksPerMultiprocessor hipModuleOccupancyMaxActiveBlocksPerMultiprocessor
        cuMemAlloc hipMalloc
        cuMemFree hipFree
        cuMemAllocHost hipHostMalloc
        cuMemFreeHost hipHostFree
        cuMemcpyHtoD
        cuMemcpyDtoH
        cuMemcpyDtoD
        cuMemcpyHtoDAsync
        cuMemcpyDtoHAsync
        cuMemsetD8
        cuMemsetD32
        cuMemGetInfo hipMemGetInfo
        cuStreamCreate hipStreamCreateWithFlags
        cuStreamDestroy
        cuStreamSynchronize
        cuEventCreate
        cuEventRecord
        cuEventSynchronize
        cuEventElapsedTime
        cuEventDestroy
        cuGetErrorString hipDrvGetErrorString
        cuGetErrorName hipDrvGetErrorName
        CUdevice hipDevice_t
        CUcontext hipCtx_t
        CUmodule hipModule_t
        CUfunction hipFunction_t
        CUdeviceptr hipDeviceptr_t
        CUstream hipStream_t
        CUevent hipEvent_t
        CUresult hipError_t
        CUdevice_attribute hipDeviceAttribute_t
        CUfunction_attribute hipFunction_attribute
        CUjit_option hipJitOption
        CUDA_SUCCESS hipSuccess
        CUDA_ERROR_INVALID_VALUE hipErrorInvalidValue
        CUDA_ERROR_OUT_OF_MEMORY hipErrorOutOfMemory
        CUDA_ERROR_NOT_INITIALIZED hipErrorNotInitialized
        CUDA_ERROR_INVALID_HANDLE hipErrorInvalidHandle
        CUDA_ERROR_NOT_FOUND hipErrorNotFound
        CUDA_ERROR_FILE_NOT_FOUND hipErrorFileNotFound
        CUDA_ERROR_INVALID_IMAGE hipErrorInvalidImage
        CUDA_ERROR_NO_DEVICE hipErrorNoDevice
        CUDA_ERROR_INVALID_DEVICE hipErrorInvalidDevice
        CUDA_ERROR_LAUNCH_FAILED hipErrorLaunchFailure
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK hipDeviceAttributeMaxThreadsPerBlock
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT hipDeviceAttributeMultiprocessorCount
        CU_DEVICE_ATTRIBUTE_WARP_SIZE hipDeviceAttributeWarpSize
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK hipDeviceAttributeMaxSharedMemoryPerBlock
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR hipDeviceAttributeComputeCapabilityMajor
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR hipDeviceAttributeComputeCapabilityMinor
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE hipDeviceAttributeClockRate
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_NUM_REGS HIP_FUNC_ATTRIBUTE_NUM_REGS
        CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        CU_STREAM_DEFAULT hipStreamDefault
        CU_STREAM_NON_BLOCKING hipStreamNonBlocking
        CU_EVENT_DEFAULT hipEventDefault
        CU_EVENT_BLOCKING_SYNC hipEventBlockingSync
        CU_EVENT_DISABLE_TIMING hipEventDisableTiming
        CU_LAUNCH_PARAM_BUFFER_POINTER HIP_LAUNCH_PARAM_BUFFER_POINTER
        CU_LAUNCH_PARAM_BUFFER_SIZE HIP_LAUNCH_PARAM_BUFFER_SIZE
        CU_LAUNCH_PARAM_END HIP_LAUNCH_PARAM_END
    """,
    "device_type": """
        __nv_bfloat16 __hip_bfloat16
        __nv_bfloat162 __hip_bfloat162
        nv_bfloat16 __hip_bfloat16
        nv_bfloat162 __hip_bfloat162
        __nv_fp8_e4m3 __hip_fp8_e4m3
        __nv_fp8_e5m2 __hip_fp8_e5m2
        __nv_fp8_storage_t __hip_fp8_storage_t
        __nv_fp8x2_storage_t __hip_fp8x2_storage_t
        __nv_fp8x4_storage_t __hip_fp8x4_storage_t
        __nv_fp8x2_e4m3 __hip_fp8x2_e4m3
        __nv_fp8x2_e5m2 __hip_fp8x2_e5m2
        __nv_fp8x4_e4m3 __hip_fp8x4_e4m3
        __nv_fp8x4_e5m2 __hip_fp8x4_e5m2
        __NV_E4M3 __HIP_E4M3
        __NV_E5M2 __HIP_E5M2
        __NV_SATFINITE __HIP_SATFINITE
        __NV_NOSAT __HIP_NOSAT
        __nv_cvt_float_to_fp8 __hip_cvt_float_to_fp8
        __nv_cvt_double_to_fp8 __hip_cvt_double_to_fp8
        __nv_cvt_float2_to_fp8x2 __hip_cvt_float2_to_fp8x2
        __nv_cvt_double2_to_fp8x2 __hip_cvt_double2_to_fp8x2
        __nv_cvt_halfraw_to_fp8 __hip_cvt_halfraw_to_fp8
        __nv_cvt_halfraw2_to_fp8x2 __hip_cvt_halfraw2_to_fp8x2
        __nv_cvt_bfloat16raw_to_fp8 __hip_cvt_bfloat16raw_to_fp8
        __nv_cvt_bfloat16raw2_to_fp8x2 __hip_cvt_bfloat16raw2_to_fp8x2
        __nv_cvt_fp8_to_halfraw __hip_cvt_fp8_to_halfraw
        __nv_cvt_fp8x2_to_halfraw2 __hip_cvt_fp8x2_to_halfraw2
    """,
    "define": """
        __CUDACC__ __HIPCC__
        __CUDA_RUNTIME_H__ HIP_INCLUDE_HIP_HIP_RUNTIME_H
        __CUDA_RUNTIME_API_H__ HIP_INCLUDE_HIP_HIP_RUNTIME_API_H
        __DRIVER_TYPES_H__ HIP_INCLUDE_HIP_DRIVER_TYPES_H
        CUDART_INF_F HIP_INF_F
        CUDART_NAN_F HIP_NAN_F
        CUDART_PI_F HIP_PI_F
        CUDART_INF HIP_INF
        CUDART_NAN HIP_NAN
        CUDART_PI HIP_PI
    """,
}

# Library prefixes: names that keep their shape and change vendor (cublasSgemm -> hipblasSgemm).
# Checked in this order, longest first, so cublasLt goes to hipblasLt rather than hipblas + "Lt".
LIBRARY_PREFIXES: tuple[tuple[str, str], ...] = (
    ("cublasLt", "hipblasLt"),
    ("CUBLASLT_", "HIPBLASLT_"),
    ("cublas", "hipblas"),
    ("CUBLAS_", "HIPBLAS_"),
    ("curand", "hiprand"),
    ("CURAND_", "HIPRAND_"),
    ("cufft", "hipfft"),
    ("CUFFT_", "HIPFFT_"),
    ("cusparse", "hipsparse"),
    ("CUSPARSE_", "HIPSPARSE_"),
    ("cusolverDn", "hipsolverDn"),
    ("CUSOLVER_", "HIPSOLVER_"),
    ("nvrtc", "hiprtc"),
    ("NVRTC_", "HIPRTC_"),
)

# #include targets. None: the header has no HIP counterpart (the include is reported and left).
HEADERS: dict[str, str | None] = {
    "cuda_runtime.h": "hip/hip_runtime.h",
    "cuda_runtime_api.h": "hip/hip_runtime_api.h",
    "cuda.h": "hip/hip_runtime.h",
    "device_launch_parameters.h": "hip/hip_runtime.h",
    "device_functions.h": "hip/device_functions.h",
    "driver_types.h": "hip/driver_types.h",
    "vector_types.h": "hip/hip_vector_types.h",
    "library_types.h": "hip/library_types.h",
    "texture_types.h": "hip/texture_types.h",
    "cuda_texture_types.h": "hip/hip_texture_types.h",
    "surface_types.h": "hip/surface_types.h",
    "cuda_fp16.h": "hip/hip_fp16.h",
    "cuda_bf16.h": "hip/hip_bf16.h",
    "cuda_fp8.h": "hip/hip_fp8.h",
    "math_constants.h": "hip/hip_math_constants.h",
    "cooperative_groups.h": "hip/hip_cooperative_groups.h",
    "cuda_profiler_api.h": "hip/hip_runtime_api.h",
    "nvrtc.h": "hip/hiprtc.h",
    "curand.h": "hiprand/hiprand.h",
    "curand_kernel.h": "hiprand/hiprand_kernel.h",
    "cublas_v2.h": "hipblas/hipblas.h",
    "cublas.h": "hipblas/hipblas.h",
    "cublasLt.h": "hipblaslt/hipblaslt.h",
    "cufft.h": "hipfft/hipfft.h",
    "cusparse.h": "hipsparse/hipsparse.h",
    "cusolverDn.h": "hipsolver/hipsolver.h",
    "cub/cub.cuh": "hipcub/hipcub.hpp",
    "cooperative_groups/reduce.h": "kernelpack_hip_compat.h",
    "cooperative_groups/scan.h": "kernelpack_hip_compat.h",
    "cooperative_groups/memcpy_async.h": None,
    "cuda/std/limits": "limits",
    "cuda/std/type_traits": "type_traits",
    "cuda/std/cstdint": "cstdint",
    "cuda/std/utility": "utility",
    "cuda_pipeline.h": "kernelpack_hip_compat.h",
    "cuda_pipeline_primitives.h": "kernelpack_hip_compat.h",
    "cuda/pipeline": None,
    "cuda/barrier": None,
    "cuda/atomic": None,
    "mma.h": "kernelpack_hip_wmma.h",
}

# CUDA headers that map to a header of kernelpack's compat folder with a reduced implementation:
# translated, and said once per file (a warning) with what to do for speed.
WMMA_HEADER = "kernelpack_hip_wmma.h"
PORTABLE_HEADER_NOTICES: dict[str, str] = {
    "mma.h": "WMMA runs on kernelpack's portable implementation (kernelpack_hip_wmma.h): "
    "correct, without matrix cores; port hot paths to rocWMMA for speed",
}

# Header folders renamed as a whole: CUB's headers (cub/block/block_load.cuh) are hipCUB's under the
# same path (hipcub/block/block_load.hpp), in the rocThrust/hipCUB/rocPRIM packages the provisioned
# toolchain installs (buildsys.toolchain.ROOTFS_PACKAGES). Thrust keeps its name: rocThrust is
# thrust/, with thrust::cuda::par kept as an alias of its HIP policy.
HEADER_FOLDERS: tuple[tuple[str, str, str, str], ...] = (
    # CUDA folder, CUDA suffix, HIP folder, HIP suffix
    ("cub/", ".cuh", "hipcub/", ".hpp"),
)


def header_target(header: str) -> str | None:
    """The HIP header for a CUDA ``#include`` name, or None (no counterpart, or not CUDA's)."""
    if header in HEADERS:
        return HEADERS[header]
    for cuda_folder, cuda_suffix, hip_folder, hip_suffix in HEADER_FOLDERS:
        if header.startswith(cuda_folder) and header.endswith(cuda_suffix):
            middle = header[len(cuda_folder) : len(header) - len(cuda_suffix)]
            return f"{hip_folder}{middle}{hip_suffix}"
    return None


# Header libraries built on rocPRIM (rocThrust, hipCUB and rocPRIM itself), by the folder of their
# HIP include names, and kernelpack's prelude header the translator puts just before each include
# of one: it fixes rocPRIM's target table where a release predates a target of the matrix (rocPRIM
# 3.4 and gfx950: docs/hipify.md, "Compatibility layer"), with the macro state the library's own
# configuration header would see. It is empty on every other target.
ROCPRIM_LIBRARY_FOLDERS = ("thrust/", "hipcub/", "rocprim/")
LIBRARY_PRELUDE = "kernelpack_hip_libraries.h"


_PRELUDE_BEFORE_RE = re.compile(rf"#include <{re.escape(LIBRARY_PRELUDE)}>\n#line \d+\n[ \t]*\Z")


def library_prelude(header: str, line: int, before: str) -> str:
    """The lines the translator puts before ``#include <header>`` (its HIP name) on source line
    ``line``, ``before`` being the source up to the directive: the prelude include and a
    ``#line`` that keeps the source's numbering, for a rocPRIM-based library not already preceded
    by them (a translation translated again); else nothing."""
    if not header.startswith(ROCPRIM_LIBRARY_FOLDERS) or _PRELUDE_BEFORE_RE.search(before[-200:]):
        return ""
    return f"#include <{LIBRARY_PRELUDE}>\n#line {line}\n"


# What to do instead of a CUDA header that has no HIP counterpart (the unsupported-api message).
HEADER_ADVICE: dict[str, str] = {
    "cooperative_groups/memcpy_async.h": "replace memcpy_async with plain loads to shared memory "
    "and a __syncthreads(), or guard it with #ifndef USE_ROCM",
    "cuda/pipeline": "replace the pipeline with plain loads to shared memory and "
    "__syncthreads(), or guard it with #ifndef USE_ROCM",
    "cuda/barrier": "use __syncthreads() or HIP's cooperative groups, or guard it with "
    "#ifndef USE_ROCM",
    "cuda/atomic": "use HIP's atomic functions (atomicAdd, ...) or std::atomic_ref, or guard it "
    "with #ifndef USE_ROCM",
}

# Headers of HIP's own toolchain: the table entries checked against it, and the headers that
# make a translated file self-sufficient (nvcc includes cuda_runtime.h implicitly; hipcc does not).
HIP_RUNTIME_HEADER = "hip/hip_runtime.h"
HIP_RUNTIME_HEADERS = frozenset({"hip/hip_runtime.h", "hip/hip_runtime_api.h"})

# Inline PTX cannot be translated, but some of it only reads a special register that HIP offers as
# a function: the inline-asm error names the replacement.
ASM_HINTS: dict[str, str] = {
    "%laneid": "__lane_id()",
    "%lanemask_lt": "__lanemask_lt() (64-bit)",
    "%lanemask_le": "__lanemask_le() (64-bit)",
    "%lanemask_gt": "__lanemask_gt() (64-bit)",
    "%lanemask_ge": "__lanemask_ge() (64-bit)",
    "%warpid": "threadIdx.x / warpSize",
    "%smid": "__smid()",
    "%clock": "clock64()",
    "%globaltimer": "wall_clock64()",
}


# Single-instruction inline PTX with an exact HIP equivalent: ``asm("<instruction>" : "=r"(x));``
# (one 32-bit output, no inputs or clobbers) becomes ``(x) = <HIP>;``. Only what means the same
# on every AMD target is here: %laneid is the lane within the hardware warp, which __lane_id() is
# (0..63 on wave64, where 32-lane code gets a wave-size finding). The lane masks are not: PTX's
# are 32 bits and a wave64's 64, so a "=r" output would lose lanes 32..63 (they keep the
# inline-asm error with the ASM_HINTS above); %clock, %smid and %warpid count other things on AMD.
PTX_IDIOMS: dict[str, str] = {
    "mov.u32 %0, %%laneid;": "__lane_id()",
    "mov.b32 %0, %%laneid;": "__lane_id()",
}

# 16-bit PTX idioms: half and bf16 conversions and moves between 16- and 32-bit registers, as
# MoE and quantization headers write them (``asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f))``).
# clang has no 16-bit "h" constraint for AMD, so such an asm stops the build; each of these
# becomes a call of the compat header's function of the same meaning (kernelpack_compat::ptx),
# operands in the asm's order (outputs by reference). Key: the instruction as ptx_idiom
# normalizes it, and the operands' constraints.
PTX_CALLS: dict[tuple[str, tuple[str, ...]], str] = {
    ("cvt.rn.f16.f32 %0, %1;", ("=h", "f")): "cvt_rn_f16_f32",
    ("cvt.f32.f16 %0, %1;", ("=f", "h")): "cvt_f32_f16",
    ("cvt.rn.bf16.f32 %0, %1;", ("=h", "f")): "cvt_rn_bf16_f32",
    ("cvt.f32.bf16 %0, %1;", ("=f", "h")): "cvt_f32_bf16",
    ("cvt.rn.f16x2.f32 %0, %1, %2;", ("=r", "f", "f")): "cvt_rn_f16x2_f32",
    ("cvt.rn.bf16x2.f32 %0, %1, %2;", ("=r", "f", "f")): "cvt_rn_bf16x2_f32",
    ("mov.b32 %0, {%1, %2};", ("=r", "h", "h")): "mov_b32_pack",
    ("mov.b32 {%0, %1}, %2;", ("=h", "=h", "r")): "mov_b32_unpack",
    ("mov.b16 %0, %1;", ("=h", "h")): "mov_b16",
    ("mov.b32 %0, %1;", ("=r", "f")): "mov_b32",
    ("mov.b32 %0, %1;", ("=f", "r")): "mov_b32",
}
PTX_CALL_NAMESPACE = "kernelpack_compat::ptx::"

# Operand-free PTX that waits for or groups asynchronous copies (cp.async, sm_80): on AMD there are
# none to wait for. Every cp.async of a translated source either took the source's synchronous
# alternative branch (the arch-feature rule) or stays an inline-asm error that stops the build, so
# in code that compiles each of these is an exact no-op (mistral.rs gdn.cu commits and waits after
# a guarded copy whose #else is a plain copy). ``asm("<instruction>");`` becomes ``((void)0);``.
PTX_ASYNC_COPY_WAITS = re.compile(r"cp\.async\.(?:commit_group|wait_all|wait_group \d+);")


@dataclass(frozen=True)
class Unsupported:
    """A CUDA facility with no HIP counterpart: translated code that uses it cannot compile."""

    name: str
    reason: str
    construct: str = ""  # findings of one construct (a header and its names) are reported once


# Removed or unsupported APIs: reported as errors (code unsupported-api), never silently kept.
UNSUPPORTED: tuple[Unsupported, ...] = (
    Unsupported(
        "cudaBindTexture",
        "texture references were removed in CUDA 12 and HIP 7; use texture objects (cudaCreateTextureObject)",
    ),
    Unsupported(
        "cudaBindTexture2D",
        "texture references were removed in CUDA 12 and HIP 7; use texture objects (cudaCreateTextureObject)",
    ),
    Unsupported(
        "cudaBindTextureToArray",
        "texture references were removed in CUDA 12 and HIP 7; use texture objects (cudaCreateTextureObject)",
    ),
    Unsupported(
        "cudaUnbindTexture",
        "texture references were removed in CUDA 12 and HIP 7; use texture objects",
    ),
    Unsupported(
        "cudaGetTextureReference",
        "texture references were removed in CUDA 12 and HIP 7; use texture objects",
    ),
    Unsupported(
        "cudaBindSurfaceToArray",
        "surface references were removed in CUDA 12; use surface objects (cudaCreateSurfaceObject)",
    ),
    Unsupported(
        "cudaConfigureCall",
        "the pre-CUDA-7 launch API was removed; use <<<...>>> or cudaLaunchKernel",
    ),
    Unsupported(
        "cudaSetupArgument",
        "the pre-CUDA-7 launch API was removed; use <<<...>>> or cudaLaunchKernel",
    ),
    Unsupported(
        "cudaLaunch", "the pre-CUDA-7 launch API was removed; use <<<...>>> or cudaLaunchKernel"
    ),
    Unsupported(
        "__match_any_sync",
        "HIP 6.4 offers __match_any_sync only behind HIP_ENABLE_WARP_SYNC_BUILTINS with a 64-bit mask; rewrite with __ballot",
    ),
    Unsupported(
        "__match_all_sync",
        "HIP 6.4 offers __match_all_sync only behind HIP_ENABLE_WARP_SYNC_BUILTINS with a 64-bit mask; rewrite with __ballot",
    ),
    Unsupported("__cvta_generic_to_shared", "PTX address-space conversion has no HIP counterpart"),
    Unsupported("__nanosleep", "HIP 6.4 has no __nanosleep; use __builtin_amdgcn_s_sleep"),
)

# CUDA intrinsics of an architecture that HIP 6.4 does not offer as CUDA writes them (the match
# functions need HIP_ENABLE_WARP_SYNC_BUILTINS and 64-bit masks): a branch of an architecture guard
# that calls one is not taken on AMD where the source has an alternative, as inline PTX is not
# (arch_features.py); HeCBench's atomicAggregate has `#if __CUDA_ARCH__ >= 700` __match_any_sync
# `#else` a ballot loop.
ARCH_ONLY_INTRINSICS = frozenset({"__match_any_sync", "__match_all_sync", "__nanosleep"})

# Template names that declare texture or surface references (texture<float, 1> tex;).
UNSUPPORTED_TEMPLATES: dict[str, str] = {
    "texture": "texture references were removed in CUDA 12 and HIP 7; use cudaTextureObject_t",
    "surface": "surface references were removed in CUDA 12; use cudaSurfaceObject_t",
}


@dataclass(frozen=True)
class WarpIntrinsic:
    """A CUDA warp intrinsic with an explicit lane mask, and the HIP form it becomes.

    Translation, and why: HIP 6.4 declares the ``_sync`` forms only when HIP_ENABLE_WARP_SYNC_BUILTINS
    is defined, and then static_asserts a 64-bit mask and runs a waterfall loop that checks the mask
    against the active lanes. CUDA code passes 32-bit literal masks (0xffffffff), so the ``_sync``
    forms cannot be kept as they are. An AMD wavefront executes its active lanes in lockstep: the
    non-sync HIP forms (``__shfl_down(v, d, width)``, ``__ballot``, ``__any``, ``__all``) already
    act on exactly the lanes that are active, which is what a full mask asks for. So a full mask
    (0xffffffff, ~0, a name defined as one, or __activemask()) is dropped and the remaining
    arguments are kept as written, including ``width``: its default is warpSize on both vendors, so
    "the whole warp" stays "the whole wavefront" on wave32 (gfx1100) and wave64 (gfx90a) alike.
    __ballot returns 64 bits (one per lane of a wave64); code that keeps it in 32 bits is reported
    (ballot-32bit), and __popc/__ffs of a ballot become __popcll/__ffsll so they count all lanes.
    A partial literal mask (0x0000ffff) cannot be expressed: the HIP form runs on every active
    lane and the mask's lane numbering covers only half a wave64; it is reported (warp-mask). A
    mask held in a variable is dropped with a note: in practice it is the set of active lanes.
    """

    cuda: str
    hip: str
    mask_arg: int  # position of the mask argument in the CUDA call


WARP_INTRINSICS: tuple[WarpIntrinsic, ...] = (
    WarpIntrinsic("__shfl_sync", "__shfl", 0),
    WarpIntrinsic("__shfl_up_sync", "__shfl_up", 0),
    WarpIntrinsic("__shfl_down_sync", "__shfl_down", 0),
    WarpIntrinsic("__shfl_xor_sync", "__shfl_xor", 0),
    WarpIntrinsic("__ballot_sync", "__ballot", 0),
    WarpIntrinsic("__any_sync", "__any", 0),
    WarpIntrinsic("__all_sync", "__all", 0),
)

# __activemask() is the ballot of a true predicate: 64 bits on HIP (HIP's own __activemask exists
# only behind HIP_ENABLE_WARP_SYNC_BUILTINS).
ACTIVEMASK_REPLACEMENT = "__ballot(1)"

# __syncwarp orders memory among the lanes of a warp. HIP 6.4 has no __syncwarp; a wavefront runs in
# lockstep, so what is left to do is keep the compiler from moving memory operations across it: a
# wave barrier between a release and an acquire fence of wavefront scope. Written as one
# parenthesized comma expression so it fits wherever the call did.
SYNCWARP_REPLACEMENT = (
    '(__builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"), __builtin_amdgcn_wave_barrier(), '
    '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront"))'
)

# 32-bit bit-counting intrinsics applied to a ballot become their 64-bit forms.
BALLOT_WIDENING: dict[str, str] = {"__popc": "__popcll", "__ffs": "__ffsll"}

# Names a ballot-like value comes from, in CUDA and in HIP spelling (the hazard checks read both, so
# running on translated output finds the same things).
BALLOT_NAMES = frozenset({"__ballot_sync", "__ballot", "__activemask", "__ballot64"})
SHUFFLE_DELTA_ARG: dict[str, int] = {
    "__shfl_down_sync": 2,
    "__shfl_xor_sync": 2,
    "__shfl_up_sync": 2,
    "__shfl_down": 1,
    "__shfl_xor": 1,
    "__shfl_up": 1,
}

# HIP runtime functions that take the kernel as ``const void*`` with no template overload (CUDA
# has one): the kernel argument at this position gets reinterpret_cast<const void*>.
KERNEL_POINTER_ARG: dict[str, int] = {
    "hipFuncSetAttribute": 0,
    "hipFuncSetCacheConfig": 0,
    "hipFuncGetAttributes": 1,
    "hipLaunchKernel": 0,
}

# Calls whose HIP counterpart takes its arguments differently: the template gets the translated
# arguments by position. HIP 6.4 lacks __floats2bfloat162_rn but has the float2 form.
CALL_REWRITES: dict[str, str] = {
    "__floats2bfloat162_rn": "__float22bfloat162_rn(make_float2({0}, {1}))",
}

# The CUDA release translated code sees in its version macros, the counterpart of the architecture
# table below for `#if CUDART_VERSION >= 11080`-style guards: the newest release whose
# version-guarded features HIP with the compat layer provides. 11.8 brings the fp8 types
# (cuda_fp8.h -> hip_fp8.h); everything 11.0 guards (bf16, cg::reduce, __reduce_*_sync, the
# pipeline primitives, CUB) is there. 12.0 is not claimed: its guards choose the 3-argument
# cudaGraphInstantiate (HIP's hipGraphInstantiate keeps 11.x's 5 arguments), texture objects only,
# Hopper APIs, and from 12.8 cuda_fp4.h, which HIP 6.4 lacks. hipcc defines none of these macros
# (HIP_VERSION counts HIP's releases, 60443484 for 6.4), so an untranslated `#if CUDART_VERSION
# >= 2020` took the pre-CUDA-2.2 branch.
CUDA_RELEASE_SEEN = (11, 8)


def cuda_version_macros(release: tuple[int, int]) -> dict[str, int]:
    """The values CUDA's version macros have in a release (major, minor): the runtime's
    CUDART_VERSION and the driver API's CUDA_VERSION are 1000 * major + 10 * minor, nvcc's
    __CUDACC_VER_MAJOR__/__CUDACC_VER_MINOR__ the two numbers (checked against nvcc's own)."""
    major, minor = release
    return {
        "CUDART_VERSION": 1000 * major + 10 * minor,
        "CUDA_VERSION": 1000 * major + 10 * minor,
        "__CUDACC_VER_MAJOR__": major,
        "__CUDACC_VER_MINOR__": minor,
    }


# Each CUDA version macro becomes a kernelpack macro (every use: values, #if, #ifdef, a user's own
# #define), which the translation defines above the source. The names are not CUDA's own, so HIP's
# libraries that test CUDART_VERSION for their CUDA backend (rocThrust) are not misled.
VERSION_MACROS: dict[str, tuple[str, int]] = {
    name: ("KERNELPACK_" + name.strip("_").replace("__", "_"), value)
    for name, value in cuda_version_macros(CUDA_RELEASE_SEEN).items()
}

# Preprocessor tests of CUDA's compiler macros: `#ifdef __CUDA_ARCH__` asks "device pass?";
# a value use (`#if __CUDA_ARCH__ >= 800`) asks for features, answered by the compat header's
# per-target KERNELPACK_CUDA_ARCH (defined in the device pass only, as nvcc's __CUDA_ARCH__ is).
CUDA_ARCH_MACRO = "__CUDA_ARCH__"
HIP_DEVICE_PASS_MACRO = "__HIP_DEVICE_COMPILE__"
CUDA_ARCH_REPLACEMENT = "KERNELPACK_CUDA_ARCH"
# A condition comparing one of these by value is an architecture guard (arch_features.py): its
# branch may hold tensor-core PTX that no AMD target has, whatever number stands for the target.
ARCH_GUARD_NAMES = frozenset({CUDA_ARCH_MACRO, CUDA_ARCH_REPLACEMENT})

# The compatibility header shipped in buildsys/hipify/compat/ (the builder puts it in the include
# folder of the hipified tree); inserted where a file uses one of the names it provides.
COMPAT_HEADER = "kernelpack_hip_compat.h"
_SIMD_STEMS = """
    vabsdiffs vabsdiffu vadd vaddss vaddus vsub vsubss vsubus vavgs vavgu vhaddu vmaxs vmaxu
    vmins vminu vcmpeq vcmpne vcmpges vcmpgeu vcmpgts vcmpgtu vcmples vcmpleu vcmplts vcmpltu
    vseteq vsetne vsetges vsetgeu vsetgts vsetgtu vsetles vsetleu vsetlts vsetltu vsads vsadu
    vabs vabsss vneg vnegss
"""
COMPAT_FUNCTIONS = frozenset(
    {f"__{stem}{lanes}" for stem in _SIMD_STEMS.split() for lanes in ("2", "4")}
    | {"__dp4a", "__dp2a_lo", "__dp2a_hi", "__trap", "__hmax_nan", "__hmin_nan"}
    | {"__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv", "__stcs", "__stcg", "__stwb", "__stwt"}
    | {"__ldg"}
    | {f"__{t}2bfloat16_rn" for t in ("int", "uint", "short", "ushort", "ll", "ull")}
    | {"__float2bfloat16_rn", "__float2bfloat162_rn", "make_bfloat162"}
    | {"htanh_approx", "h2tanh_approx"}
    | {"atomicCAS", "atomicAdd", "min", "max"}
    | {f"__reduce_{op}_sync" for op in ("add", "min", "max", "and", "or", "xor")}
    | {"__pipeline_memcpy_async", "__pipeline_commit", "__pipeline_wait_prior"}
)
# Annotations the header defines (as nothing: AMD has nothing to do for them); a file that writes
# one includes it.
COMPAT_MACROS = frozenset({"__grid_constant__"})
# Host functions the header names into the global namespace (nvcc's runtime header does): compiled
# by the toolchain tests, not compared on the GPU (they are the C library's own).
COMPAT_HOST_FUNCTIONS = frozenset({"isfinite", "isinf", "isnan", "signbit"})
# cooperative_groups members the compat header adds (cg::reduce and its operators,
# block_tile_memory).
COMPAT_CG_MEMBERS = frozenset(
    {
        "reduce",
        "inclusive_scan",
        "exclusive_scan",
        "plus",
        "less",
        "greater",
        "bit_and",
        "bit_or",
        "bit_xor",
        "block_tile_memory",
    }
)
# Tile members the compat header extends (shuffles of vector and 16-bit float types): a file
# that calls one on a group includes it.
COMPAT_TILE_MEMBERS = frozenset({"shfl", "shfl_xor", "shfl_up", "shfl_down"})

# Cooperative-groups tile members that HIP 6.4 declares only behind HIP_ENABLE_WARP_SYNC_BUILTINS
# (there they take 64-bit masks built by HIP itself, so defining the macro is correct).
CG_SYNC_MEMBERS = frozenset({"ballot", "any", "all", "match_any", "match_all"})
WARP_SYNC_MACRO = "HIP_ENABLE_WARP_SYNC_BUILTINS"

# Identifiers that look like CUDA but are not left-over API: the untranslated check skips them.
# A storage class specifier C++17 removed: nvcc still accepts it under -std=c++17 (a warning at
# most), clang refuses it ("ISO C++17 does not allow 'register' storage class specifier"). It asks
# for nothing a compiler honours, so the translation drops the keyword (a note, once per file).
REMOVED_STORAGE_CLASS = "register"

CUDA_LOOKALIKES = frozenset({"cudaDeviceId", "cudaDevice"})


def _derived(name: str) -> str:
    for cuda, hip in (("CUDA_", "HIP_"), ("CU_", "HIP_"), ("cuda", "hip"), ("cu", "hip")):
        if name.startswith(cuda):
            return hip + name[len(cuda) :]
    raise ValueError(f"hipify tables: {name!r} needs an explicit HIP name (no prefix rule applies)")


@dataclass(frozen=True)
class Rename:
    cuda: str
    hip: str
    kind: str


def _build_renames() -> dict[str, Rename]:
    renames: dict[str, Rename] = {}
    for kind, block in RUNTIME_BLOCKS.items():
        for line in block.strip().splitlines():
            fields = line.split()
            if len(fields) not in (1, 2):
                raise ValueError(f"hipify tables: malformed line {line.strip()!r} in {kind}")
            cuda = fields[0]
            hip = fields[1] if len(fields) == 2 else _derived(cuda)
            if cuda in renames:
                raise ValueError(
                    f"hipify tables: {cuda} listed twice ({renames[cuda].kind}, {kind})"
                )
            renames[cuda] = Rename(cuda, hip, kind)
    for entry in UNSUPPORTED:
        if entry.name in renames:
            raise ValueError(f"hipify tables: {entry.name} is both renamed and unsupported")
    return renames


RENAMES: dict[str, Rename] = _build_renames()
UNSUPPORTED_BY_NAME: dict[str, Unsupported] = {entry.name: entry for entry in UNSUPPORTED}
WARP_BY_NAME: dict[str, WarpIntrinsic] = {entry.cuda: entry for entry in WARP_INTRINSICS}


# Names renamed only inside a library's namespace: rocThrust spells thrust::cuda::par (the policy
# that takes a stream) as thrust::hip::par; a cuda:: elsewhere is libcu++ and is reported.
QUALIFIED_RENAMES: dict[tuple[str, str], str] = {("thrust", "cuda"): "hip"}

# Library namespaces renamed whole (cub::BlockScan -> hipcub::BlockScan); only the exact name, so
# identifiers that merely start with it (cube, cubic) stay.
LIBRARY_NAMES: dict[str, str] = {"cub": "hipcub"}


def library_rename(name: str) -> str | None:
    """The hip library name for a CUDA library name (cublasSgemm -> hipblasSgemm, cub ->
    hipcub), else None."""
    if name in LIBRARY_NAMES:
        return LIBRARY_NAMES[name]
    for cuda, hip in LIBRARY_PREFIXES:
        if name.startswith(cuda) and len(name) > len(cuda):
            return hip + name[len(cuda) :]
    return None


# Texture and surface fetches: HIP declares each with __hip_img_chk__, "unavailable" where the
# compiler defines __HIP_NO_IMAGE_SUPPORT (the GPU has no image instructions), so a file that
# calls one compiles for the other targets and fails for these (tests/test_hipify_toolchain.py
# checks both lists against the provisioned headers and the compiler's own macros).
_TEXTURE_BLOCK = """
    tex1D tex1DGrad tex1DLayered tex1DLayeredGrad tex1DLayeredLod tex1DLod tex1Dfetch
    tex2D tex2DGrad tex2DLayered tex2DLayeredGrad tex2DLayeredLod tex2DLod tex2Dgather
    tex3D tex3DGrad tex3DLod
    texCubemap texCubemapGrad texCubemapLayered texCubemapLayeredGrad texCubemapLayeredLod
    texCubemapLod
    surf1Dread surf1Dwrite surf1DLayeredread surf1DLayeredwrite surf2Dread surf2Dwrite
    surf2DLayeredread surf2DLayeredwrite surf3Dread surf3Dwrite surfCubemapread surfCubemapwrite
    surfCubemapLayeredread surfCubemapLayeredwrite
"""
TEXTURE_FUNCTIONS = frozenset(_TEXTURE_BLOCK.split())
# AMD targets without image instructions: HIP 6.4's amd_device_functions.h names
# gfx940, gfx941 and gfx942; clang 21 also defines __HIP_NO_IMAGE_SUPPORT for gfx950 and
# gfx9-4-generic (and no longer accepts gfx940/gfx941).
NO_IMAGE_TARGETS = ("gfx940", "gfx941", "gfx942", "gfx950", "gfx9-4-generic")
# The texture fetches and host calls the compat layer carries over texture objects
# (compat/kernelpack_hip_texture.h): the translator calls kernelpack_compat's, which fetch in
# software on the targets above and are HIP's own elsewhere. The other texture functions (Lod,
# Grad, Cubemap, gather, surfaces) keep the texture-targets finding.
SOFTWARE_TEXTURE_FUNCTIONS = frozenset(
    {"tex1D", "tex1Dfetch", "tex2D", "tex3D", "tex1DLayered", "tex2DLayered"}
)
TEXTURE_HEADER = "kernelpack_hip_texture.h"
TEXTURE_NAMESPACE = "kernelpack_compat::"
# CUDA host calls -> the compat layer's (HIP's names, in kernelpack_compat): on a device without
# image support they make software arrays and texture objects, elsewhere they are HIP's.
SOFTWARE_TEXTURE_HOST_CALLS = {
    cuda: TEXTURE_NAMESPACE + "hip" + cuda[len("cuda") :]
    for cuda in (
        "cudaCreateTextureObject",
        "cudaDestroyTextureObject",
        "cudaMallocArray",
        "cudaMalloc3DArray",
        "cudaFreeArray",
        "cudaMemcpy2DToArray",
        "cudaMemcpy2DFromArray",
        "cudaMemcpy3D",
    )
}
