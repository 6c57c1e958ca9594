// The compat layer's software texture fetches (kernelpack_hip_texture.h, kernelpack_compat::tex*)
// against CUDA's texture unit on an NVIDIA GPU: the same texels as a CUDA array behind a hardware
// texture object and as linear memory behind a software descriptor, fetched at the same
// coordinates, for tex1D, tex2D, tex3D and tex2DLayered in every address mode x filter mode x
// normalized-coordinates flag, over float texels read as themselves and uchar4 texels read as
// normalized floats; tex1Dfetch over linear memory. Coordinates are odd multiples of 1/1024
// texel (no rounding ties, exact in float) and, separately, uniform random floats.
// Point fetches of float texels must be equal bit for bit, of uchar4 within 1e-6; linear ones
// within 2e-5 (the filtering arithmetic's order): a weight off by one 1/256 step is 1e-3 away. Built by tests/test_hipify_texture_gpu.py with nvcc -DKERNELPACK_COMPAT_RENAME.
// With a path argument it also writes every differing texture's fetches there as JSON (up to 512
// a texture: index, coordinates, CUDA's value, ours), for working out the unit's rules offline
// (the texels come from the seeded generator below, so the fetches are reproducible).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernelpack_hip_texture.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e = (call);                                                           \
    if (e != cudaSuccess) {                                                           \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)

// kind 1: tex1D, 2: tex2D, 3: tex3D, 4: tex2DLayered (layer c.w), 5: tex1Dfetch (index c.x)
__global__ void fetch(int kind, cudaTextureObject_t hardware, cudaTextureObject_t software,
                      const float4* at, float4* theirs, float4* ours, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float4 c = at[i];
  switch (kind) {
    case 1:
      theirs[i] = tex1D<float4>(hardware, c.x);
      ours[i] = kernelpack_compat::tex1D<float4>(software, c.x);
      break;
    case 2:
      theirs[i] = tex2D<float4>(hardware, c.x, c.y);
      ours[i] = kernelpack_compat::tex2D<float4>(software, c.x, c.y);
      break;
    case 3:
      theirs[i] = tex3D<float4>(hardware, c.x, c.y, c.z);
      ours[i] = kernelpack_compat::tex3D<float4>(software, c.x, c.y, c.z);
      break;
    case 4:
      theirs[i] = tex2DLayered<float4>(hardware, c.x, c.y, static_cast<int>(c.w));
      ours[i] = kernelpack_compat::tex2DLayered<float4>(software, c.x, c.y, static_cast<int>(c.w));
      break;
    default:
      theirs[i] = tex1Dfetch<float4>(hardware, static_cast<int>(c.x));
      ours[i] = kernelpack_compat::tex1Dfetch<float4>(software, static_cast<int>(c.x));
      break;
  }
}

static unsigned long long state = 0x9E3779B97F4A7C15ull;
static unsigned next() {
  state ^= state << 13; state ^= state >> 7; state ^= state << 17;
  return static_cast<unsigned>(state >> 11);
}
static float uniform(float lo, float hi) { return lo + (hi - lo) * (next() / 4294967296.0f); }

struct Case {
  int kind, width, height, depth;  // depth: slices (3D) or layers (layered)
  bool uchar;                      // uchar4 read as normalized float; else float4 as itself
};

static const char* mode_name[] = {"wrap", "clamp", "mirror", "border"};
static std::FILE* mismatches = nullptr;  // the JSON file, where one was named
static bool first_texture = true;
static const char* kind_name[] = {"", "tex1D", "tex2D", "tex3D", "tex2DLayered", "tex1Dfetch"};

// One texture in both forms, n fetches at grid then random coordinates; returns the mismatches.
static int run(const Case& c, int mode, bool linear, bool normalized, int n) {
  const size_t element = c.uchar ? 4 : 16;
  const size_t count = static_cast<size_t>(c.width) * c.height * c.depth;
  std::vector<unsigned char> texels(count * element);
  for (size_t k = 0; k < count * 4; ++k) {
    if (c.uchar) {
      texels[k] = static_cast<unsigned char>(next());
    } else {
      const float v = uniform(-1.0f, 1.0f);
      std::memcpy(&texels[k * 4], &v, 4);
    }
  }
  cudaChannelFormatDesc format = c.uchar ? cudaCreateChannelDesc<uchar4>() : cudaCreateChannelDesc<float4>();
  cudaTextureDesc description{};
  for (int a = 0; a < 3; ++a) description.addressMode[a] = static_cast<cudaTextureAddressMode>(mode);
  description.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
  description.readMode = c.uchar ? cudaReadModeNormalizedFloat : cudaReadModeElementType;
  description.normalizedCoords = normalized;
  for (int k = 0; k < 4; ++k) description.borderColor[k] = uniform(-1.0f, 1.0f);

  void* linear_texels = nullptr;
  CHECK(cudaMalloc(&linear_texels, texels.size()));
  CHECK(cudaMemcpy(linear_texels, texels.data(), texels.size(), cudaMemcpyHostToDevice));
  cudaTextureObject_t hardware = 0;
  cudaArray_t array = nullptr;
  cudaResourceDesc resource{};
  const size_t pitch = c.width * element;
  if (c.kind == 5) {
    resource.resType = cudaResourceTypeLinear;
    resource.res.linear.devPtr = linear_texels;
    resource.res.linear.desc = format;
    resource.res.linear.sizeInBytes = texels.size();
  } else {
    const bool layered = c.kind == 4;
    const cudaExtent extent = make_cudaExtent(c.width, c.kind >= 2 ? c.height : 0,
                                              c.kind >= 3 ? c.depth : 0);
    CHECK(cudaMalloc3DArray(&array, &format, extent, layered ? cudaArrayLayered : 0));
    cudaMemcpy3DParms copy{};
    copy.srcPtr = make_cudaPitchedPtr(texels.data(), pitch, c.width, c.height);
    copy.dstArray = array;
    copy.extent = make_cudaExtent(c.width, c.height, c.depth);
    copy.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&copy));
    resource.resType = cudaResourceTypeArray;
    resource.res.array.array = array;
  }
  CHECK(cudaCreateTextureObject(&hardware, &resource, &description, nullptr));

  kernelpack_compat::texture_descriptor d{};
  const bool layered = c.kind == 4;
  const size_t width = c.kind == 5 ? count : c.width;
  if (!kernelpack_compat::describe_texture(&d, linear_texels, pitch, pitch * c.height, width,
                                           c.height, layered ? 1 : c.depth,
                                           layered ? c.depth : 0, format, description)) {
    std::printf("describe_texture refused a texture CUDA accepts\n");
    std::exit(2);
  }
  void* device_descriptor = nullptr;
  CHECK(cudaMalloc(&device_descriptor, sizeof(d)));
  CHECK(cudaMemcpy(device_descriptor, &d, sizeof(d), cudaMemcpyHostToDevice));
  const auto software = reinterpret_cast<cudaTextureObject_t>(device_descriptor);

  std::vector<float4> at(n);
  const int sizes[3] = {static_cast<int>(width), c.height, c.depth};
  const int dims = c.kind == 3 ? 3 : (c.kind == 1 || c.kind == 5 ? 1 : 2);
  for (int i = 0; i < n; ++i) {
    float v[4] = {0, 0, 0, 0};
    for (int a = 0; a < dims; ++a) {
      const float span = static_cast<float>(sizes[a]);
      float u;
      if (c.kind == 5) {
        u = static_cast<float>(static_cast<int>(next() % (sizes[a] + 4)) - 2);
      } else if (i < n / 2) {  // odd multiples of 1/1024 texel over [-n/2 - 2, 3n/2 + 2)
        const int lo = -(sizes[a] / 2 + 2) * 512, hi = (3 * sizes[a] / 2 + 2) * 512;
        u = (2.0f * (lo + static_cast<int>(next() % (hi - lo))) + 1.0f) / 1024.0f;
      } else {
        u = uniform(-0.5f * span - 2.0f, 1.5f * span + 2.0f);
      }
      v[a] = normalized && c.kind != 5 ? u / span : u;
    }
    if (layered) v[3] = static_cast<float>(next() % c.depth);
    at[i] = make_float4(v[0], v[1], v[2], v[3]);
  }
  float4 *device_at, *theirs, *ours;
  CHECK(cudaMalloc(&device_at, n * sizeof(float4)));
  CHECK(cudaMalloc(&theirs, n * sizeof(float4)));
  CHECK(cudaMalloc(&ours, n * sizeof(float4)));
  CHECK(cudaMemcpy(device_at, at.data(), n * sizeof(float4), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(theirs, 0xFF, n * sizeof(float4)));
  CHECK(cudaMemset(ours, 0xFF, n * sizeof(float4)));
  fetch<<<(n + 255) / 256, 256>>>(c.kind, hardware, software, device_at, theirs, ours, n);
  CHECK(cudaGetLastError());
  std::vector<float4> t(n), o(n);
  CHECK(cudaMemcpy(t.data(), theirs, n * sizeof(float4), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(o.data(), ours, n * sizeof(float4), cudaMemcpyDeviceToHost));
  int bad = 0;
  bool listed = false;
  for (int i = 0; i < n; ++i) {
    const float a[4] = {t[i].x, t[i].y, t[i].z, t[i].w}, b[4] = {o[i].x, o[i].y, o[i].z, o[i].w};
    bool same = true;
    for (int k = 0; k < 4; ++k) {
      // float texels by point: the texel itself; unorm8 by point: v / 255 within 1e-6 (the
      // hardware's conversion need not round as a division does)
      const float tolerance = linear ? 2e-5f : (c.uchar ? 1e-6f : 0.0f);
      same = same && (tolerance > 0.0f ? std::fabs(a[k] - b[k]) <= tolerance
                                       : std::memcmp(&a[k], &b[k], 4) == 0);
    }
    if (!same && bad++ < 2) {
      std::printf("  %s %s %s %s %s at (%.9g, %.9g, %.9g, %.0f): CUDA (%.9g, %.9g, %.9g, %.9g), "
                  "ours (%.9g, %.9g, %.9g, %.9g)\n",
                  kind_name[c.kind], c.uchar ? "uchar4-normalized" : "float4", mode_name[mode],
                  linear ? "linear" : "point", normalized ? "normalized" : "texel", at[i].x,
                  at[i].y, at[i].z, at[i].w, a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
    }
    if (!same && mismatches != nullptr && bad <= 512) {
      if (!listed) {
        std::fprintf(mismatches,
                     "%s{\"kind\": \"%s\", \"format\": \"%s\", \"mode\": \"%s\", "
                     "\"filter\": \"%s\", \"coordinates\": \"%s\", \"fetches\": [",
                     first_texture ? "" : ",\n", kind_name[c.kind],
                     c.uchar ? "uchar4-normalized" : "float4", mode_name[mode],
                     linear ? "linear" : "point", normalized ? "normalized" : "texel");
        first_texture = false;
        listed = true;
      } else {
        std::fprintf(mismatches, ", ");
      }
      std::fprintf(mismatches, "[%d, [%.9g, %.9g, %.9g, %.9g], [%.9g, %.9g, %.9g, %.9g], "
                   "[%.9g, %.9g, %.9g, %.9g]]", i, at[i].x, at[i].y, at[i].z, at[i].w, a[0],
                   a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
    }
  }
  if (listed) std::fprintf(mismatches, "], \"differ\": %d}", bad);
  CHECK(cudaDestroyTextureObject(hardware));
  if (array != nullptr) CHECK(cudaFreeArray(array));
  CHECK(cudaFree(linear_texels));
  CHECK(cudaFree(device_descriptor));
  CHECK(cudaFree(device_at));
  CHECK(cudaFree(theirs));
  CHECK(cudaFree(ours));
  return bad;
}

int main(int argc, char** argv) {
  const int n = 4096;
  if (argc > 1) {
    mismatches = std::fopen(argv[1], "w");
    if (mismatches == nullptr) {
      std::printf("cannot write %s\n", argv[1]);
      return 2;
    }
    std::fprintf(mismatches, "{\"fetches_per_texture\": %d, \"textures\": [\n", n);
  }
  const Case cases[] = {
      {1, 16, 1, 1, false}, {1, 32, 1, 1, true},  {2, 16, 8, 1, false}, {2, 8, 16, 1, true},
      {3, 8, 4, 4, false},  {3, 4, 4, 8, true},   {4, 8, 4, 3, false},  {4, 4, 8, 3, true},
  };
  int total = 0, failing = 0, runs = 0;
  for (const Case& c : cases) {
    for (int mode = 0; mode < 4; ++mode) {
      for (int linear = 0; linear < 2; ++linear) {
        for (int normalized = 0; normalized < 2; ++normalized) {
          const int bad = run(c, mode, linear != 0, normalized != 0, n);
          ++runs;
          total += bad;
          failing += bad != 0;
          if (bad) {
            std::printf("%s %s %s %s %s: %d of %d differ\n", kind_name[c.kind],
                        c.uchar ? "uchar4-normalized" : "float4", mode_name[mode],
                        linear ? "linear" : "point", normalized ? "normalized" : "texel", bad, n);
          }
        }
      }
    }
  }
  for (bool uchar : {false, true}) {
    const Case c{5, 64, 1, 1, uchar};
    const int bad = run(c, 1, false, false, n);
    ++runs;
    total += bad;
    failing += bad != 0;
    if (bad) std::printf("tex1Dfetch %s: %d of %d differ\n", uchar ? "uchar4" : "float4", bad, n);
  }
  std::printf("%d textures, %d fetches each: %d textures differ, %d fetches in all\n", runs, n,
              failing, total);
  if (mismatches != nullptr) {
    std::fprintf(mismatches, "\n], \"textures_differing\": %d, \"fetches_differing\": %d}\n",
                 failing, total);
    std::fclose(mismatches);
  }
  return total == 0 ? 0 : 1;
}
