"""The vendor runtimes: the interface the loader uses (:mod:`.runtime`), CUDA's driver API
(:mod:`.cuda`) and HIP's module API (:mod:`.hip`), the run-time compilers (:mod:`.rtc`), what the
installed runtimes can load (:mod:`.support`), and the generic launch: argument signatures
(:mod:`.signature`), the ctypes launcher and the C launcher ``_launcher`` (:mod:`.launch`,
``_native/launcher.c``)."""
