"""The GPUs of this machine and the device arguments of a call: detection (:mod:`.detect`, sysfs,
NVML and the CUDA driver's device list), the vendor libraries it opens (:mod:`.libraries`,
:mod:`.cuda_driver`), the ``device`` argument (:mod:`.argument`) and other libraries' arrays
(:mod:`.arrays`). Below the backends: nothing here launches a kernel."""
