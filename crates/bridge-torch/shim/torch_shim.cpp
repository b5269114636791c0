// A small C shim over libtorch for what tch 0.24's C API (torch-sys) does not expose:
//   - tensors over foreign memory with a deleter (so the tensor keeps the owner alive),
//   - every c10::ScalarType (tch's Kind has no UInt16),
//   - device moves / copies / pinned allocations that never ask tch for a Kind,
//   - loading libtorch_cuda at run time (so torch's CUDA backend registers),
//   - the caching allocator's statistics and empty-cache, through at::accelerator,
//   - the CUDA device UUID (through the driver API, loaded with dlopen).
//
// Every function catches C++ exceptions: on failure it returns NULL / a negative value and the
// message is kept in a thread-local buffer that ab_last_error() returns.
// Tensors are returned as `at::Tensor*`, the same type torch-sys's `tensor` handle is, so Rust
// wraps them with tch::Tensor::from_ptr and tch's Drop deletes them.

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <dlfcn.h>
#include <unistd.h>
#include <cstdlib>

#include <atomic>
#include <cstdint>
#include <memory>
#include <cctype>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {
thread_local std::string last_error;

void set_error(const char* msg) { last_error = msg ? msg : "unknown error"; }

c10::Device make_device(int device_type, int device_index) {
  // 0 = CPU, 1 = CUDA (the only two this crate uses).
  if (device_type == 1) {
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  }
  return c10::Device(c10::DeviceType::CPU);
}

void* boxed(at::Tensor t) { return static_cast<void*>(new at::Tensor(std::move(t))); }
}  // namespace

#ifndef AB_TORCH_CUDA_LIB
#define AB_TORCH_CUDA_LIB ""
#endif

namespace {
// Load libtorch_cuda.so at program start (a static initialiser of this object, which every
// binary using bridge-torch links): its own static initialisers register torch's CUDA hooks and
// allocator. This has to happen before anything asks ATen about CUDA, because ATen caches its
// CUDA hooks on first use (CUDA would stay disabled for the process) -- the run-time equivalent
// of linking libtorch_cuda with -Wl,--no-as-needed, except that a missing CUDA library only
// disables torch:cuda:N instead of stopping the program.
std::string cuda_load_error = "not attempted";
int cuda_load_state = -1;  // 0 loaded, 1 failed / disabled

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "yes";
}

struct CudaLoader {
  CudaLoader() {
    if (env_flag("ARRAYBRIDGE_TORCH_NO_CUDA")) {
      cuda_load_error = "disabled by ARRAYBRIDGE_TORCH_NO_CUDA";
      cuda_load_state = 1;
      return;
    }
    const char* built = AB_TORCH_CUDA_LIB;
    bool have_built = built[0] != '\0' && access(built, F_OK) == 0;
    void* h = dlopen(have_built ? built : "libtorch_cuda.so", RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      const char* e = dlerror();
      cuda_load_error = have_built ? std::string(e ? e : "dlopen failed")
                                   : std::string("CPU-only libtorch (libtorch_cuda.so not found: ") +
                                         (e ? e : "dlopen failed") + ")";
      cuda_load_state = 1;
      return;
    }
    cuda_load_error.clear();
    cuda_load_state = 0;
  }
};
CudaLoader cuda_loader;
}  // namespace

#define AB_TRY(fail, body)            \
  try {                               \
    body                              \
  } catch (const std::exception& e) { \
    set_error(e.what());              \
    return fail;                      \
  } catch (...) {                     \
    set_error("unknown C++ exception"); \
    return fail;                      \
  }

extern "C" {

typedef void (*ab_deleter_fn)(void* ctx);

const char* ab_last_error(void) { return last_error.c_str(); }

void ab_clear_error(void) { last_error.clear(); }

// A tensor over `data` (not copied) with the given sizes and element strides. When the last
// reference to the tensor's storage goes, torch calls deleter(ctx) (from whatever thread drops it).
// If this function fails, the deleter is NOT called: the caller keeps ownership of ctx.
void* ab_from_blob(void* data, int64_t ndim, const int64_t* sizes, const int64_t* strides,
                   int scalar_type, int device_type, int device_index, ab_deleter_fn deleter,
                   void* ctx) {
  AB_TRY(nullptr, {
    std::vector<int64_t> sz(sizes, sizes + ndim);
    std::vector<int64_t> st(strides, strides + ndim);
    auto dev = make_device(device_type, device_index);
    auto opts = at::TensorOptions()
                    .dtype(static_cast<c10::ScalarType>(scalar_type))
                    .device(dev);
    auto out = std::make_unique<at::Tensor>();
    // The deleter only hands ctx back to Rust once this function has succeeded: if building the
    // tensor throws half-way (after torch made the storage), the caller still owns ctx.
    auto armed = std::make_shared<std::atomic<bool>>(false);
    *out = at::for_blob(data, sz)
               .strides(st)
               .deleter([deleter, ctx, armed](void*) {
                 if (armed->load()) {
                   deleter(ctx);
                 }
               })
               .options(opts)
               .target_device(dev)
               .make_tensor();
    armed->store(true);
    return static_cast<void*>(out.release());
  })
}

// The c10::ScalarType of a tensor (-1 on error).
int ab_scalar_type(const void* t) {
  AB_TRY(-1, { return static_cast<int>(static_cast<const at::Tensor*>(t)->scalar_type()); })
}

// An uninitialised contiguous tensor; pinned host memory when pinned != 0 (CPU only).
void* ab_empty(int64_t ndim, const int64_t* sizes, int scalar_type, int device_type,
               int device_index, int pinned) {
  AB_TRY(nullptr, {
    std::vector<int64_t> sz(sizes, sizes + ndim);
    auto opts = at::TensorOptions()
                    .dtype(static_cast<c10::ScalarType>(scalar_type))
                    .device(make_device(device_type, device_index))
                    .pinned_memory(pinned != 0);
    return boxed(at::empty(sz, opts));
  })
}

// dst.copy_(src, non_blocking). 0 on success.
int ab_copy(void* dst, const void* src, int non_blocking) {
  AB_TRY(-1, {
    static_cast<at::Tensor*>(dst)->copy_(*static_cast<const at::Tensor*>(src), non_blocking != 0);
    return 0;
  })
}

// src.to(device) as a new tensor (always a copy), same dtype, contiguous.
void* ab_to_device(const void* src, int device_type, int device_index, int non_blocking) {
  AB_TRY(nullptr, {
    const at::Tensor& s = *static_cast<const at::Tensor*>(src);
    return boxed(s.to(make_device(device_type, device_index), s.scalar_type(), non_blocking != 0,
                      /*copy=*/true, c10::MemoryFormat::Contiguous));
  })
}

// A pinned (page-locked) host copy of a CPU tensor, contiguous.
void* ab_pin_memory(const void* src) {
  AB_TRY(nullptr, {
    const at::Tensor& s = *static_cast<const at::Tensor*>(src);
    return boxed(s.contiguous().pin_memory());
  })
}

// Whether the tensor's memory is pinned (1), not (0), error (-1).
int ab_is_pinned(const void* t) {
  AB_TRY(-1, { return static_cast<const at::Tensor*>(t)->is_pinned() ? 1 : 0; })
}

// Whether libtorch_cuda.so was loaded at program start: 0 yes, 1 no (reason in *err).
int ab_cuda_load_state(const char** err) {
  *err = cuda_load_error.c_str();
  return cuda_load_state;
}

// Accelerator (CUDA) allocator figures for one device. Returns 0 on success, 1 when there is no
// CUDA accelerator, -1 on error.
int ab_cuda_memory(int device_index, uint64_t* allocated, uint64_t* reserved, uint64_t* free_bytes,
                   uint64_t* total_bytes) {
  AB_TRY(-1, {
    auto acc = at::accelerator::getAccelerator(false);
    if (!acc.has_value() || *acc != c10::DeviceType::CUDA) {
      return 1;
    }
    // The caching allocator's per-device state exists only once CUDA is initialised.
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    auto idx = static_cast<c10::DeviceIndex>(device_index);
    auto stats = at::accelerator::getDeviceStats(idx);
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *allocated = static_cast<uint64_t>(stats.allocated_bytes[agg].current);
    *reserved = static_cast<uint64_t>(stats.reserved_bytes[agg].current);
    auto info = at::accelerator::getMemoryInfo(idx);
    *free_bytes = static_cast<uint64_t>(info.first);
    *total_bytes = static_cast<uint64_t>(info.second);
    return 0;
  })
}

// Number of CUDA devices torch sees (0 when its CUDA backend is not loaded), -1 on error.
int ab_cuda_device_count(void) {
  AB_TRY(-1, {
    auto acc = at::accelerator::getAccelerator(false);
    if (!acc.has_value() || *acc != c10::DeviceType::CUDA) {
      return 0;
    }
    return static_cast<int>(at::accelerator::deviceCount());
  })
}

// Release the CUDA caching allocator's unused blocks (all devices). 0 ok, 1 no CUDA, -1 error.
int ab_cuda_empty_cache(void) {
  AB_TRY(-1, {
    auto acc = at::accelerator::getAccelerator(false);
    if (!acc.has_value() || *acc != c10::DeviceType::CUDA) {
      return 1;
    }
    at::accelerator::emptyCache();
    return 0;
  })
}

// Wait for all work on a CUDA device. 0 ok, 1 no CUDA, -1 error.
int ab_cuda_synchronize(int device_index) {
  AB_TRY(-1, {
    auto acc = at::accelerator::getAccelerator(false);
    if (!acc.has_value() || *acc != c10::DeviceType::CUDA) {
      return 1;
    }
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    at::accelerator::synchronizeDevice(static_cast<c10::DeviceIndex>(device_index));
    return 0;
  })
}

// The 16-byte UUID of CUDA device `ordinal` through the driver API (libcuda.so.1, dlopen'ed).
// Torch's device index N is the driver's ordinal N (both honour CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER). 0 ok, -1 error.
int ab_cuda_uuid(int ordinal, unsigned char* out16) {
  typedef int (*init_t)(unsigned int);
  typedef int (*get_t)(int*, int);
  typedef int (*uuid_t_)(unsigned char*, int);
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    set_error("libcuda.so.1 not found");
    return -1;
  }
  auto cu_init = reinterpret_cast<init_t>(dlsym(lib, "cuInit"));
  auto cu_get = reinterpret_cast<get_t>(dlsym(lib, "cuDeviceGet"));
  auto cu_uuid = reinterpret_cast<uuid_t_>(dlsym(lib, "cuDeviceGetUuid_v2"));
  if (cu_uuid == nullptr) {
    cu_uuid = reinterpret_cast<uuid_t_>(dlsym(lib, "cuDeviceGetUuid"));
  }
  if (cu_init == nullptr || cu_get == nullptr || cu_uuid == nullptr) {
    set_error("libcuda.so.1 lacks cuInit/cuDeviceGet/cuDeviceGetUuid");
    return -1;
  }
  int rc = cu_init(0);
  if (rc != 0) {
    set_error(("cuInit failed with CUresult " + std::to_string(rc)).c_str());
    return -1;
  }
  int dev = 0;
  rc = cu_get(&dev, ordinal);
  if (rc != 0) {
    set_error(("cuDeviceGet failed with CUresult " + std::to_string(rc)).c_str());
    return -1;
  }
  rc = cu_uuid(out16, dev);
  if (rc != 0) {
    set_error(("cuDeviceGetUuid failed with CUresult " + std::to_string(rc)).c_str());
    return -1;
  }
  return 0;
}

}  // extern "C"
