// Texture fetches in software, for AMD targets without image instructions (gfx940, gfx941,
// gfx942, gfx950, gfx9-4-generic), where HIP marks tex1D, tex2D & co unavailable.
//
// The translator routes texture object calls here on every target (kernelpack_compat::tex2D,
// kernelpack_compat::hipCreateTextureObject, ...). In the device pass of a target with image
// instructions each fetch is HIP's own (the texture unit); where the target has none
// (__HIP_NO_IMAGE_SUPPORT) or KERNELPACK_SOFTWARE_TEXTURES is defined (the tests' switch), the
// fetch reads the texels through a pointer and filters them as the CUDA programming guide's
// texture-fetching appendix defines. The host side decides per device at run time: on a device
// without image support (hipDeviceAttributeImageSupport 0) a texture object is the device address
// of a texture_descriptor and an array is linear pitched memory; elsewhere HIP's own objects.
//
// Where the guide leaves the arithmetic open, the fetch does what CUDA's texture unit was measured
// to do (tests/hipify_texture_gpu.cu, docs/hipify.md): linear filtering's weights are 9-bit fixed
// point with 8 fractional bits, each axis's fraction rounded to the nearest 1/256 with halves up
// (the ninth bit holds 1.0); in 2D the four corner weights are themselves multiples of 1/256 (the
// product of the two upper weights rounded, halves up, the other three the remainders, so the four
// sum to 1); tex1D filters as a 2D fetch at y = 0 of a texture one texel high, so that under border
// addressing of y half of every linear fetch is the border colour; and the border colour of 8-bit
// unsigned texels read as normalized floats is converted to their format (to half precision, then
// to the nearest k / 255 in [0, 1]); their linear fetches come back as 16-bit unorm (the nearest
// k / 65535). In 3D the x-z corner weights are rounded as in 2D and each split along y with its
// upper share rounded; an axis clamped at its edge (both texels the edge one) weighs 0. With
// KERNELPACK_COMPAT_RENAME (nvcc) the fetches are always the software ones, so
// tests/hipify_texture_gpu.cu can compare them with CUDA's texture unit.
#pragma once

#if defined(KERNELPACK_COMPAT_RENAME)
#include <cuda_fp16.h>
#define KP_TEXTURE_OBJECT cudaTextureObject_t
#else
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#include <mutex>
#include <set>
#define KP_TEXTURE_OBJECT hipTextureObject_t
#endif

#if defined(KERNELPACK_COMPAT_RENAME) || defined(KERNELPACK_SOFTWARE_TEXTURES) || \
    (defined(__HIP_DEVICE_COMPILE__) && defined(__HIP_NO_IMAGE_SUPPORT) && __HIP_NO_IMAGE_SUPPORT)
#define KP_TEXTURE_IN_SOFTWARE 1
#else
#define KP_TEXTURE_IN_SOFTWARE 0
#endif

namespace kernelpack_compat {

// The values of CUDA's (and HIP's) enums, which a descriptor stores.
enum texture_address : int { address_wrap = 0, address_clamp = 1, address_mirror = 2, address_border = 3 };
enum texture_kind : int { kind_signed = 0, kind_unsigned = 1, kind_float = 2 };

// What a software fetch needs, in device memory (tests/test_emulator_texture.py writes it by hand:
// keep the layout, 96 bytes).
struct alignas(8) texture_descriptor {
  unsigned long long data;   // address of texel (0, 0, 0)
  unsigned long long pitch;  // bytes from one row to the next
  unsigned long long slice;  // bytes from one slice (3D) or layer to the next
  int width, height, depth;  // texels; height and depth 1 where the texture has fewer dimensions
  int layers;                // 0: not layered
  int kind;                  // texture_kind
  int bits;                  // of each channel: 8, 16 or 32
  int channels;              // 1, 2 or 4
  int address[3];            // texture_address per dimension
  int linear;                // filter mode: 0 point, 1 linear
  int normalized_float;      // read mode: 0 element type, 1 normalized float
  int normalized_coords;
  float border[4];
};
static_assert(sizeof(texture_descriptor) == 96, "texture_descriptor is 96 bytes");

// A fetch's texel values before they become the caller's type: floats for the float path
// (float and half formats, normalized-float reads), exact integers otherwise.
template <typename E>
struct texel4 {
  E v[4];
};

// ---- the caller's result type --------------------------------------------------------------
template <typename T>
struct texture_result;
#define KP_TEXTURE_RESULT(S, V)                                                                   \
  template <>                                                                                     \
  struct texture_result<S> {                                                                      \
    template <typename E>                                                                         \
    __device__ static S from(const texel4<E>& t) { return static_cast<S>(t.v[0]); }               \
  };                                                                                              \
  template <>                                                                                     \
  struct texture_result<V##1> {                                                                   \
    template <typename E>                                                                         \
    __device__ static V##1 from(const texel4<E>& t) { return make_##V##1(static_cast<S>(t.v[0])); } \
  };                                                                                              \
  template <>                                                                                     \
  struct texture_result<V##2> {                                                                   \
    template <typename E>                                                                         \
    __device__ static V##2 from(const texel4<E>& t) {                                             \
      return make_##V##2(static_cast<S>(t.v[0]), static_cast<S>(t.v[1]));                         \
    }                                                                                             \
  };                                                                                              \
  template <>                                                                                     \
  struct texture_result<V##4> {                                                                   \
    template <typename E>                                                                         \
    __device__ static V##4 from(const texel4<E>& t) {                                             \
      return make_##V##4(static_cast<S>(t.v[0]), static_cast<S>(t.v[1]), static_cast<S>(t.v[2]),  \
                         static_cast<S>(t.v[3]));                                                 \
    }                                                                                             \
  };
KP_TEXTURE_RESULT(signed char, char)
KP_TEXTURE_RESULT(unsigned char, uchar)
KP_TEXTURE_RESULT(short, short)
KP_TEXTURE_RESULT(unsigned short, ushort)
KP_TEXTURE_RESULT(int, int)
KP_TEXTURE_RESULT(unsigned int, uint)
KP_TEXTURE_RESULT(float, float)
#undef KP_TEXTURE_RESULT
template <>
struct texture_result<char> {
  template <typename E>
  __device__ static char from(const texel4<E>& t) { return static_cast<char>(t.v[0]); }
};

// ---- texels --------------------------------------------------------------------------------
__device__ inline const unsigned char* texel_address(const texture_descriptor& d, int i, int j,
                                                     int k) {
  const unsigned long long bytes = static_cast<unsigned long long>(d.bits / 8 * d.channels);
  return reinterpret_cast<const unsigned char*>(d.data) + k * d.slice + j * d.pitch + i * bytes;
}

// Channel c of the texel at p as an exact integer (sign- or zero-extended).
__device__ inline long long texel_integer(const texture_descriptor& d, const unsigned char* p,
                                          int c) {
  const bool s = d.kind == kind_signed;
  switch (d.bits) {
    case 8:
      return s ? static_cast<long long>(reinterpret_cast<const signed char*>(p)[c]) : p[c];
    case 16:
      return s ? static_cast<long long>(reinterpret_cast<const short*>(p)[c])
               : reinterpret_cast<const unsigned short*>(p)[c];
    default:
      return s ? static_cast<long long>(reinterpret_cast<const int*>(p)[c])
               : reinterpret_cast<const unsigned*>(p)[c];
  }
}

// Channel c as the float path reads it: float and half as they are, integers converted
// (normalized-float reads: unsigned v / (2^n - 1), signed max(v / (2^(n-1) - 1), -1)).
__device__ inline float texel_float(const texture_descriptor& d, const unsigned char* p, int c) {
  if (d.kind == kind_float) {
    return d.bits == 16 ? __half2float(reinterpret_cast<const __half*>(p)[c])
                        : reinterpret_cast<const float*>(p)[c];
  }
  const float v = static_cast<float>(texel_integer(d, p, c));
  if (!d.normalized_float) return v;
  if (d.kind == kind_unsigned) return v / static_cast<float>((1u << d.bits) - 1u);
  return fmaxf(v / static_cast<float>((1 << (d.bits - 1)) - 1), -1.0f);
}

// Index i of an axis of n texels under the address mode: wrap and mirror repeat with period n
// and 2n (mirror reflects texel i to 2n - 1 - i), clamp keeps [0, n - 1], border marks it outside.
__device__ inline int texel_index(int i, int n, int mode, bool& outside) {
  switch (mode) {
    case address_wrap: {
      const int r = i % n;
      return r < 0 ? r + n : r;
    }
    case address_mirror: {
      int r = i % (2 * n);
      r = r < 0 ? r + 2 * n : r;
      return r < n ? r : 2 * n - 1 - r;
    }
    case address_border:
      outside = outside || i < 0 || i >= n;
      return i;
    default:
      return i < 0 ? 0 : (i >= n ? n - 1 : i);
  }
}

// floorf(u) as an int, bounded so that a huge or NaN coordinate cannot overflow.
__device__ inline int floor_index(float u) {
  return static_cast<int>(floorf(fminf(fmaxf(u, -1.0e9f), 1.0e9f)));
}

// Channel c of the border colour as the texture unit returns it: converted to the texel format for
// 8-bit unsigned texels read as normalized floats (through half precision, as measured: 0.64119
// gives 163 / 255, not 164 / 255), as given otherwise (float texels; other integer formats
// unmeasured).
__device__ inline float border_value(const texture_descriptor& d, int c) {
  if (d.normalized_float && d.kind == kind_unsigned && d.bits == 8) {
    const float h = __half2float(__float2half(d.border[c]));
    return floorf(fminf(fmaxf(h, 0.0f), 1.0f) * 255.0f + 0.5f) / 255.0f;
  }
  return d.border[c];
}

template <typename E>
__device__ inline texel4<E> texel_at(const texture_descriptor& d, const int* index,
                                     const int* size, const int* mode, int dims, int layer) {
  bool outside = false;
  int at[3] = {0, 0, 0};
  for (int a = 0; a < dims; ++a) at[a] = texel_index(index[a], size[a], mode[a], outside);
  texel4<E> t;
  for (int c = 0; c < 4; ++c) t.v[c] = E(0);
  if (outside) {
    if (sizeof(E) == sizeof(float)) {  // the border colour; integers read as themselves get 0
      for (int c = 0; c < d.channels; ++c) t.v[c] = static_cast<E>(border_value(d, c));
    }
    return t;
  }
  const unsigned char* p = texel_address(d, at[0], at[1], layer >= 0 ? layer : at[2]);
  for (int c = 0; c < d.channels; ++c) {
    if constexpr (sizeof(E) == sizeof(float)) {
      t.v[c] = texel_float(d, p, c);
    } else {
      t.v[c] = texel_integer(d, p, c);
    }
  }
  return t;
}

// A fetch at coords[0 .. dims) (layer >= 0: that layer of a layered texture), as the guide's
// texture-fetching appendix defines it. Unnormalized coordinates take wrap and mirror as clamp
// (CUDA supports them only with normalized coordinates).
template <typename E>
__device__ inline texel4<E> sample(const texture_descriptor& d, const float* coords, int dims,
                                   int layer) {
  const int size[3] = {d.width, d.height, d.depth};
  int mode[3];
  float u[3];
  for (int a = 0; a < dims; ++a) {
    const int m = d.address[a];
    mode[a] = !d.normalized_coords && (m == address_wrap || m == address_mirror) ? address_clamp : m;
    u[a] = d.normalized_coords ? coords[a] * static_cast<float>(size[a]) : coords[a];
  }
  if (layer >= 0) layer = layer < 0 ? 0 : (layer >= d.layers ? d.layers - 1 : layer);
  if constexpr (sizeof(E) != sizeof(float)) {
    int index[3];
    for (int a = 0; a < dims; ++a) index[a] = floor_index(u[a]);
    return texel_at<E>(d, index, size, mode, dims, layer);
  } else {
    if (!d.linear) {
      int index[3];
      for (int a = 0; a < dims; ++a) index[a] = floor_index(u[a]);
      return texel_at<E>(d, index, size, mode, dims, layer);
    }
    int low[3];
    int step[3];  // each axis's upper weight in 1/256 (0 .. 256)
    for (int a = 0; a < dims; ++a) {
      const float b = u[a] - 0.5f;
      low[a] = floor_index(b);
      step[a] = static_cast<int>(floorf((b - floorf(b)) * 256.0f + 0.5f));
      // clamped where both texels are the edge one: the unit weighs that axis 0 (seen in 3D)
      if (mode[a] == address_clamp && (low[a] < 0 || low[a] >= size[a] - 1)) step[a] = 0;
    }
    // The corner weights in 1/256. 2D: the upper-upper one rounded, the rest its remainders. 3D:
    // x and z so, then each of those four split along y, the upper share rounded.
    const int across = dims == 3 ? 2 : 1;  // the plane's second axis
    const int both = dims >= 2 ? (step[0] * step[across] + 128) >> 8 : 0;
    const int plane[4] = {256 - step[0] - step[across] + both, step[0] - both, step[across] - both,
                          both};
    // 8-bit unsigned texels read as normalized floats: the unit returns the filtered value as
    // 16-bit unorm, the nearest k / 65535, so the sum is kept exact: weights in 1/256 times
    // texels in 1/255 (border colours included, already k / 255).
    const bool unorm8 = d.normalized_float && d.kind == kind_unsigned && d.bits == 8;
    int whole[4] = {0, 0, 0, 0};
    texel4<float> sum;
    for (int c = 0; c < 4; ++c) sum.v[c] = 0.0f;
    for (int corner = 0; corner < (1 << dims); ++corner) {
      int index[3];
      for (int a = 0; a < dims; ++a) index[a] = low[a] + ((corner >> a) & 1);
      int share = (corner & 1) ? step[0] : 256 - step[0];  // the corner's weight in 1/256
      if (dims == 2) share = plane[corner];
      if (dims == 3) {
        const int p = plane[(corner & 1) | ((corner >> 1) & 2)];
        const int up = (p * step[1] + 128) >> 8;
        share = (corner & 2) ? up : p - up;
      }
      const float w = static_cast<float>(share) * (1.0f / 256.0f);
      const texel4<float> t = texel_at<float>(d, index, size, mode, dims, layer);
      for (int c = 0; c < 4; ++c) {
        if (unorm8) {
          whole[c] += share * static_cast<int>(rintf(t.v[c] * 255.0f));
        } else {
          sum.v[c] = fmaf(w, t.v[c], sum.v[c]);
        }
      }
    }
    // whole / (256 * 255) to the nearest k / 65535 (k = whole * 257 / 256), halves up
    if (unorm8) {
      for (int c = 0; c < 4; ++c) {
        sum.v[c] = static_cast<float>((whole[c] * 257 + 128) >> 8) / 65535.0f;
      }
    }
    return sum;
  }
}

template <typename T>
__device__ inline T software_fetch(KP_TEXTURE_OBJECT object, const float* coords, int dims,
                                   int layer) {
  const texture_descriptor& d = *reinterpret_cast<const texture_descriptor*>(object);
  if (d.kind == kind_float || d.normalized_float) {
    return texture_result<T>::from(sample<float>(d, coords, dims, layer));
  }
  return texture_result<T>::from(sample<long long>(d, coords, dims, layer));
}

// ---- the fetches the translator routes here ------------------------------------------------
// Each fetch: its name, its parameters after the texture object, and their names (the software
// forms below are written out, each its own sampling; HIP's and the pointer forms follow from it).
#define KP_TEXTURE_FETCHES(FETCH)                                                                 \
  FETCH(tex1Dfetch, (int x), (x))                                                                  \
  FETCH(tex1D, (float x), (x))                                                                     \
  FETCH(tex2D, (float x, float y), (x, y))                                                         \
  FETCH(tex3D, (float x, float y, float z), (x, y, z))                                             \
  FETCH(tex1DLayered, (float x, int layer), (x, layer))                                            \
  FETCH(tex2DLayered, (float x, float y, int layer), (x, y, layer))
#define KP_UNPARENTHESIZED(...) __VA_ARGS__
#if KP_TEXTURE_IN_SOFTWARE
template <typename T>
__device__ inline T tex1Dfetch(KP_TEXTURE_OBJECT object, int x) {
  const texture_descriptor& d = *reinterpret_cast<const texture_descriptor*>(object);
  texel4<float> zero{{0.0f, 0.0f, 0.0f, 0.0f}};
  if (x < 0 || x >= d.width) return texture_result<T>::from(zero);  // CUDA returns 0 there
  const unsigned char* p = texel_address(d, x, 0, 0);
  if (d.kind == kind_float || d.normalized_float) {
    texel4<float> t = zero;
    for (int c = 0; c < d.channels; ++c) t.v[c] = texel_float(d, p, c);
    return texture_result<T>::from(t);
  }
  texel4<long long> t{{0, 0, 0, 0}};
  for (int c = 0; c < d.channels; ++c) t.v[c] = texel_integer(d, p, c);
  return texture_result<T>::from(t);
}
// As the texture unit does: a 2D fetch at y = 0 of a texture one texel high (so y's address mode
// shows under border addressing with linear filtering: half of each fetch is the border colour).
template <typename T>
__device__ inline T tex1D(KP_TEXTURE_OBJECT object, float x) {
  const float c[2] = {x, 0.0f};
  return software_fetch<T>(object, c, 2, -1);
}
template <typename T>
__device__ inline T tex2D(KP_TEXTURE_OBJECT object, float x, float y) {
  const float c[2] = {x, y};
  return software_fetch<T>(object, c, 2, -1);
}
template <typename T>
__device__ inline T tex3D(KP_TEXTURE_OBJECT object, float x, float y, float z) {
  const float c[3] = {x, y, z};
  return software_fetch<T>(object, c, 3, -1);
}
template <typename T>
__device__ inline T tex1DLayered(KP_TEXTURE_OBJECT object, float x, int layer) {
  const float c[1] = {x};
  return software_fetch<T>(object, c, 1, layer);
}
template <typename T>
__device__ inline T tex2DLayered(KP_TEXTURE_OBJECT object, float x, float y, int layer) {
  const float c[2] = {x, y};
  return software_fetch<T>(object, c, 2, layer);
}
#else
#define KP_HIP_FETCH(name, params, args)                                                          \
  template <typename T>                                                                            \
  __device__ inline T name(KP_TEXTURE_OBJECT object, KP_UNPARENTHESIZED params) {                 \
    return ::name<T>(object, KP_UNPARENTHESIZED args);                                             \
  }
KP_TEXTURE_FETCHES(KP_HIP_FETCH)
#undef KP_HIP_FETCH
#endif
// CUDA's pointer forms: tex2D(&value, object, x, y) (qualified: ADL would find HIP's too).
#define KP_POINTER_FETCH(name, params, args)                                                      \
  template <typename T>                                                                            \
  __device__ inline void name(T* out, KP_TEXTURE_OBJECT object, KP_UNPARENTHESIZED params) {      \
    *out = kernelpack_compat::name<T>(object, KP_UNPARENTHESIZED args);                            \
  }
KP_TEXTURE_FETCHES(KP_POINTER_FETCH)
#undef KP_POINTER_FETCH
#undef KP_TEXTURE_FETCHES
#undef KP_UNPARENTHESIZED

// ---- host: descriptors ---------------------------------------------------------------------
// The descriptor of texels at data (pitch and slice in bytes) described by a channel format and a
// texture description (CUDA's or HIP's structs, which share field names); false where CUDA's
// cudaCreateTextureObject refuses the combination (3 channels, unequal channel sizes, linear
// filtering of integers read as themselves, normalized-float reads of 32-bit integers).
template <typename Channels, typename Description>
inline bool describe_texture(texture_descriptor* out, const void* data, size_t pitch, size_t slice,
                             size_t width, size_t height, size_t depth, size_t layers,
                             const Channels& channels, const Description& description) {
  const int sizes[4] = {channels.x, channels.y, channels.z, channels.w};
  int count = 0;
  for (int c = 0; c < 4; ++c) count += sizes[c] != 0;
  const int kind = static_cast<int>(channels.f);
  const int bits = channels.x;
  if (count == 3 || count == 0 || (bits != 8 && bits != 16 && bits != 32)) return false;
  for (int c = 0; c < count; ++c) {
    if (sizes[c] != bits) return false;
  }
  if (kind < kind_signed || kind > kind_float || (kind == kind_float && bits == 8)) return false;
  const bool normalized_float = static_cast<int>(description.readMode) == 1 && kind != kind_float;
  if (normalized_float && bits == 32) return false;
  const bool linear = static_cast<int>(description.filterMode) == 1;
  if (linear && kind != kind_float && !normalized_float) return false;
  texture_descriptor d{};
  d.data = reinterpret_cast<unsigned long long>(data);
  d.pitch = pitch;
  d.slice = slice;
  d.width = static_cast<int>(width);
  d.height = static_cast<int>(height ? height : 1);
  d.depth = static_cast<int>(depth ? depth : 1);
  d.layers = static_cast<int>(layers);
  d.kind = kind;
  d.bits = bits;
  d.channels = count;
  for (int a = 0; a < 3; ++a) d.address[a] = static_cast<int>(description.addressMode[a]);
  d.linear = linear;
  d.normalized_float = normalized_float;
  d.normalized_coords = description.normalizedCoords != 0;
  for (int c = 0; c < 4; ++c) d.border[c] = description.borderColor[c];
  *out = d;
  return true;
}

#if !defined(KERNELPACK_COMPAT_RENAME)
// ---- host: HIP's texture API over software objects where the device has no image support -----
// A software array: pitched linear memory, recorded so that the copies, the texture object and
// hipFreeArray recognise it.
struct software_array {
  void* data;
  size_t pitch, slice, width, height, depth;
  unsigned flags;
  hipChannelFormatDesc format;
};

inline std::mutex& software_lock() {
  static std::mutex lock;
  return lock;
}
// Every live software array and texture object (their handles as HIP's types see them).
inline std::set<const void*>& software_handles() {
  static std::set<const void*> handles;
  return handles;
}
inline bool is_software(const void* handle) {
  std::lock_guard<std::mutex> held(software_lock());
  return software_handles().count(handle) != 0;
}
inline void remember(const void* handle, bool keep) {
  std::lock_guard<std::mutex> held(software_lock());
  if (keep) {
    software_handles().insert(handle);
  } else {
    software_handles().erase(handle);
  }
}

// Whether the current device fetches in software: it has no image instructions (or the tests'
// switch is on).
inline bool software_textures() {
#if defined(KERNELPACK_SOFTWARE_TEXTURES)
  return true;
#else
  int device = 0;
  int image = 1;
  if (hipGetDevice(&device) != hipSuccess) return false;
  if (hipDeviceGetAttribute(&image, hipDeviceAttributeImageSupport, device) != hipSuccess) {
    return false;
  }
  return image == 0;
#endif
}

inline size_t element_bytes(const hipChannelFormatDesc& f) {
  return static_cast<size_t>(f.x + f.y + f.z + f.w) / 8;
}

inline hipError_t hipMalloc3DArray(hipArray_t* array, const hipChannelFormatDesc* format,
                                   hipExtent extent, unsigned int flags = 0) {
  if (!software_textures()) return ::hipMalloc3DArray(array, format, extent, flags);
  if (array == nullptr || format == nullptr || extent.width == 0 || element_bytes(*format) == 0) {
    return hipErrorInvalidValue;
  }
  const size_t rows = extent.height ? extent.height : 1;
  const size_t slices = extent.depth ? extent.depth : 1;
  const size_t pitch = (extent.width * element_bytes(*format) + 255) / 256 * 256;
  void* data = nullptr;
  const hipError_t made = hipMalloc(&data, pitch * rows * slices);
  if (made != hipSuccess) return made;
  auto* software = new software_array{data,         pitch,        pitch * rows, extent.width,
                                      extent.height, extent.depth, flags,        *format};
  *array = reinterpret_cast<hipArray_t>(software);
  remember(software, true);
  return hipSuccess;
}

inline hipError_t hipMallocArray(hipArray_t* array, const hipChannelFormatDesc* format,
                                 size_t width, size_t height = 0, unsigned int flags = 0) {
  if (!software_textures()) return ::hipMallocArray(array, format, width, height, flags);
  return kernelpack_compat::hipMalloc3DArray(array, format, make_hipExtent(width, height, 0), flags);
}

inline hipError_t hipFreeArray(hipArray_t array) {
  if (!is_software(array)) return ::hipFreeArray(array);
  remember(array, false);
  auto* software = reinterpret_cast<software_array*>(array);
  const hipError_t freed = hipFree(software->data);
  delete software;
  return freed;
}

inline hipError_t hipMemcpy2DToArray(hipArray_t dst, size_t w_offset, size_t h_offset,
                                     const void* src, size_t spitch, size_t width, size_t height,
                                     hipMemcpyKind kind) {
  if (!is_software(dst)) {
    return ::hipMemcpy2DToArray(dst, w_offset, h_offset, src, spitch, width, height, kind);
  }
  const auto* a = reinterpret_cast<const software_array*>(dst);
  char* to = static_cast<char*>(a->data) + h_offset * a->pitch + w_offset;
  return hipMemcpy2D(to, a->pitch, src, spitch, width, height, kind);
}

inline hipError_t hipMemcpy2DFromArray(void* dst, size_t dpitch, hipArray_const_t src,
                                       size_t w_offset, size_t h_offset, size_t width,
                                       size_t height, hipMemcpyKind kind) {
  if (!is_software(src)) {
    return ::hipMemcpy2DFromArray(dst, dpitch, src, w_offset, h_offset, width, height, kind);
  }
  const auto* a = reinterpret_cast<const software_array*>(src);
  const char* from = static_cast<const char*>(a->data) + h_offset * a->pitch + w_offset;
  return hipMemcpy2D(dst, dpitch, from, a->pitch, width, height, kind);
}

// hipMemcpy3D into a software array from pitched memory (positions and extent in elements on the
// array's side, as CUDA counts them; the source's x in bytes). Copies out of a software array
// are not carried (hipErrorNotSupported).
inline hipError_t hipMemcpy3D(const hipMemcpy3DParms* p) {
  if (p == nullptr || (!is_software(p->dstArray) && !is_software(p->srcArray))) {
    return ::hipMemcpy3D(p);
  }
  if (p->srcArray != nullptr || p->srcPtr.ptr == nullptr) return hipErrorNotSupported;
  const auto* a = reinterpret_cast<const software_array*>(p->dstArray);
  const size_t element = element_bytes(a->format);
  for (size_t z = 0; z < (p->extent.depth ? p->extent.depth : 1); ++z) {
    const char* from = static_cast<const char*>(p->srcPtr.ptr) +
                       (p->srcPos.z + z) * p->srcPtr.pitch * p->srcPtr.ysize +
                       p->srcPos.y * p->srcPtr.pitch + p->srcPos.x;
    char* to = static_cast<char*>(a->data) + (p->dstPos.z + z) * a->slice +
               p->dstPos.y * a->pitch + p->dstPos.x * element;
    const hipError_t copied =
        hipMemcpy2D(to, a->pitch, from, p->srcPtr.pitch, p->extent.width * element,
                    p->extent.height ? p->extent.height : 1, p->kind);
    if (copied != hipSuccess) return copied;
  }
  return hipSuccess;
}

inline hipError_t hipCreateTextureObject(hipTextureObject_t* object, const hipResourceDesc* resource,
                                         const hipTextureDesc* texture,
                                         const hipResourceViewDesc* view) {
  if (!software_textures()) return ::hipCreateTextureObject(object, resource, texture, view);
  if (object == nullptr || resource == nullptr || texture == nullptr) return hipErrorInvalidValue;
  if (view != nullptr) return hipErrorNotSupported;
  texture_descriptor d{};
  bool described = false;
  switch (resource->resType) {
    case hipResourceTypeLinear: {
      const auto& r = resource->res.linear;
      const size_t element = element_bytes(r.desc);
      if (element == 0) return hipErrorInvalidValue;
      described = describe_texture(&d, r.devPtr, r.sizeInBytes, r.sizeInBytes,
                                   r.sizeInBytes / element, 1, 1, 0, r.desc, *texture);
      break;
    }
    case hipResourceTypePitch2D: {
      const auto& r = resource->res.pitch2D;
      described = describe_texture(&d, r.devPtr, r.pitchInBytes, r.pitchInBytes * r.height,
                                   r.width, r.height, 1, 0, r.desc, *texture);
      break;
    }
    case hipResourceTypeArray: {
      if (!is_software(resource->res.array.array)) return hipErrorInvalidValue;
      const auto* a = reinterpret_cast<const software_array*>(resource->res.array.array);
      const bool layered = (a->flags & hipArrayLayered) != 0;
      described = describe_texture(&d, a->data, a->pitch, a->slice, a->width, a->height,
                                   layered ? 1 : a->depth, layered ? a->depth : 0, a->format,
                                   *texture);
      break;
    }
    default:
      return hipErrorNotSupported;  // mipmapped arrays
  }
  if (!described) return hipErrorInvalidValue;
  void* device = nullptr;
  const hipError_t made = hipMalloc(&device, sizeof(d));
  if (made != hipSuccess) return made;
  const hipError_t copied = hipMemcpy(device, &d, sizeof(d), hipMemcpyHostToDevice);
  if (copied != hipSuccess) {
    (void)hipFree(device);
    return copied;
  }
  *object = reinterpret_cast<hipTextureObject_t>(device);
  remember(device, true);
  return hipSuccess;
}

inline hipError_t hipDestroyTextureObject(hipTextureObject_t object) {
  if (!is_software(object)) return ::hipDestroyTextureObject(object);
  remember(object, false);
  return hipFree(object);
}
#endif

}  // namespace kernelpack_compat
