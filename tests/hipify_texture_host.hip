// kernelpack_compat::describe_texture over HIP's own structs (the host half of the software
// textures): each case prints its name and the descriptor's 96 bytes in hex, or "refused".
// Built and run by tests/test_hipify_texture_toolchain.py (host pass only: no GPU needed).
#include <cstdio>

#include "kernelpack_hip_texture.h"

static void show(const char* name, const hipChannelFormatDesc& format, hipTextureAddressMode mode,
                 hipTextureFilterMode filter, hipTextureReadMode read, int normalized,
                 size_t depth, size_t layers) {
  hipTextureDesc t{};
  for (int a = 0; a < 3; ++a) t.addressMode[a] = mode;
  t.filterMode = filter;
  t.readMode = read;
  t.normalizedCoords = normalized;
  t.borderColor[0] = 0.25f;
  t.borderColor[1] = -0.5f;
  t.borderColor[2] = 1.0f;
  t.borderColor[3] = 2.0f;
  kernelpack_compat::texture_descriptor d{};
  if (!kernelpack_compat::describe_texture(&d, reinterpret_cast<void*>(0x7f0012345600ull), 256,
                                           2048, 16, 8, depth, layers, format, t)) {
    std::printf("%s refused\n", name);
    return;
  }
  std::printf("%s ", name);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&d);
  for (size_t k = 0; k < sizeof(d); ++k) std::printf("%02x", bytes[k]);
  std::printf("\n");
}

int main() {
  const auto u8x4 = hipCreateChannelDesc(8, 8, 8, 8, hipChannelFormatKindUnsigned);
  const auto f32 = hipCreateChannelDesc(32, 0, 0, 0, hipChannelFormatKindFloat);
  const auto f16x2 = hipCreateChannelDesc(16, 16, 0, 0, hipChannelFormatKindFloat);
  const auto s16 = hipCreateChannelDesc(16, 0, 0, 0, hipChannelFormatKindSigned);
  const auto s32 = hipCreateChannelDesc(32, 0, 0, 0, hipChannelFormatKindSigned);
  show("uchar4-mirror-linear", u8x4, hipAddressModeMirror, hipFilterModeLinear,
       hipReadModeNormalizedFloat, 1, 1, 0);
  show("float-border-point-3d", f32, hipAddressModeBorder, hipFilterModePoint,
       hipReadModeElementType, 0, 4, 0);
  show("half2-wrap-layered", f16x2, hipAddressModeWrap, hipFilterModeLinear,
       hipReadModeNormalizedFloat, 1, 1, 3);
  show("short-clamp-point", s16, hipAddressModeClamp, hipFilterModePoint, hipReadModeElementType,
       0, 1, 0);
  show("three-channels", hipCreateChannelDesc(8, 8, 8, 0, hipChannelFormatKindUnsigned),
       hipAddressModeClamp, hipFilterModePoint, hipReadModeElementType, 0, 1, 0);
  show("unequal-channels", hipCreateChannelDesc(8, 16, 0, 0, hipChannelFormatKindUnsigned),
       hipAddressModeClamp, hipFilterModePoint, hipReadModeElementType, 0, 1, 0);
  show("linear-integers", u8x4, hipAddressModeClamp, hipFilterModeLinear, hipReadModeElementType,
       0, 1, 0);
  show("normalized-int32", s32, hipAddressModeClamp, hipFilterModePoint,
       hipReadModeNormalizedFloat, 0, 1, 0);
  show("float8", hipCreateChannelDesc(8, 0, 0, 0, hipChannelFormatKindFloat), hipAddressModeClamp,
       hipFilterModePoint, hipReadModeElementType, 0, 1, 0);
  return 0;
}
