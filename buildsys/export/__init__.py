"""Exporters: a build's modules as source for programs that embed their kernels (issue 48).

``python -m buildsys export --lang rust|c`` (buildsys.export.command) builds, reads the build's
output (tables: one language-neutral model of the modules, images, kernels and the loader's NVIDIA
selection) and writes it as Rust (rust: kernels.rs and the image files it includes) or C (c:
kernels.h and kernels.c). docs/rust.md and docs/c.md describe what is generated.
"""
