"""The HIP bindings against ROCm's real libraries (the provisioned toolchain's, or a native ROCm).

No AMD GPU is here, but libamdhip64 and libhiprtc load and answer without one: every symbol the
runtime module binds must resolve, hipInit must report "no device" as a clear RuntimeLibraryError,
and hipRTC must compile a module's CUDA source into a code object for the asked target, which the
formats reader then checks (target id, wavefront, kernel).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

WHEELS = Path(__file__).resolve().parent.parent / "wheels"

PROBE = """
import json, sys
from kernelpack.errors import RuntimeLibraryError
from kernelpack.formats import read_code_object
from kernelpack.backends.hip import HipRuntime
from kernelpack.backends.support import library_versions
from kernelpack.backends.rtc import SourceCompiler

source, target = sys.argv[1], sys.argv[2]
result = {"versions": library_versions()}
try:
    HipRuntime()
    result["init"] = "ok"
except RuntimeLibraryError as error:
    result["init"] = str(error)
compiler = SourceCompiler("hiprtc")
result["compiler"] = compiler.version()
code = read_code_object(compiler.compile(source, "demo", target).image, "compiled")
result["target"] = str(code.target)
result["kernels"] = {k.name: k.wavefront for k in code.kernels}
try:
    compiler.compile("this is not CUDA", "broken", target)
except Exception as error:
    result["broken"] = str(error)
print(json.dumps(result))
"""

SOURCE = """extern "C" __global__ void scale(float *y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= a;
}
"""


@pytest.mark.toolchain
@pytest.mark.parametrize(("target", "wavefront"), [("gfx90a:xnack-", 64), ("gfx1100", 32)])
def test_hip_runtime_and_hiprtc(amd_toolchain: Toolchain, target: str, wavefront: int) -> None:
    argv = ["/usr/bin/env", f"PYTHONPATH={WHEELS}", "python3", "-c", PROBE, SOURCE, target]
    done = subprocess.run(amd_toolchain.command(argv), capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    hip_major = re.search(r"\d+", amd_toolchain.version)
    assert hip_major is not None and result["versions"]["hip"].startswith(hip_major[0] + ".")
    assert result["init"] in ("ok", "hipInit failed: hipErrorNoDevice (100)")
    assert result["compiler"].startswith("hiprtc ") and "libhiprtc.so" in result["compiler"]
    assert result["target"] == target
    assert result["kernels"] == {"scale": wavefront}
    assert "hiprtc compile of broken" in result["broken"]


@pytest.mark.toolchain
def test_the_multiprocessor_count_attribute_is_hips_own(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """hip.py's number for hipDeviceAttributeMultiprocessorCount (the launch geometry's CU count)
    is the one ROCm's own header gives, as its compiler evaluates the enum."""
    from kernelpack.backends.hip import _HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT

    source = tmp_path / "attribute.cpp"
    source.write_text(
        "#include <hip/hip_runtime_api.h>\n#include <cstdio>\n"
        'int main() { std::printf("%d\\n", (int)hipDeviceAttributeMultiprocessorCount); }\n'
    )
    program = tmp_path / "attribute"
    amd_toolchain.run(["hipcc", str(source), "-o", str(program)])
    shown = amd_toolchain.run([str(program)])
    assert int(shown.stdout) == _HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
