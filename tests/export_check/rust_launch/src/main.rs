// `kernelpack-export-launch INPUT OUTPUT MUL ADD`: candle's affine_f32 on the GPU from the image
// the export's select() picks for it. INPUT holds n float32 values (little-endian); OUTPUT gets
// the n float32 values the kernel wrote (x * MUL + ADD on the GPU), for the test to compare with
// numpy: the binary checks nothing itself. The output buffer is filled with 0xFF bytes (NaN)
// before the launch, so an element the kernel leaves unwritten shows. libcuda is opened at run
// time (dlopen), so the binary builds and starts on a machine without a driver, where it says so
// in one line. Prints the image it loaded. Exit status: 0 done, 1 no GPU or a CUDA call failed,
// 2 bad arguments or files.
#![deny(warnings)]

mod kernels {
    include!(concat!(env!("OUT_DIR"), "/kernelpack/kernels.rs"));
}

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr::null_mut;

extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}

const PROGRAM: &str = "kernelpack-export-launch";
const RTLD_NOW: c_int = 2;
const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const COMPUTE_CAPABILITY_MINOR: c_int = 76;
const POISON: c_uint = 0xFFFF_FFFF;

type Result_ = c_int;
type Ptr = *mut c_void;

/// One line on stderr and the exit status: what a user or the test can act on, no panic trace.
fn fail(status: i32, message: &str) -> ! {
    eprintln!("{PROGRAM}: {message}");
    std::process::exit(status);
}

struct Cuda {
    library: Ptr,
}

impl Cuda {
    fn open() -> Cuda {
        let library = unsafe { dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW) };
        if library.is_null() {
            fail(1, "libcuda.so.1 cannot be opened: no NVIDIA driver on this machine");
        }
        Cuda { library }
    }

    fn symbol(&self, name: &str) -> Ptr {
        let name_c = CString::new(name).expect("a symbol name without NUL");
        let found = unsafe { dlsym(self.library, name_c.as_ptr()) };
        if found.is_null() {
            fail(1, &format!("libcuda.so.1 has no {name}: a driver too old for this program"));
        }
        found
    }

    /// `what` failed with `status`: its CUresult name where the driver gives one.
    fn check(&self, what: &str, status: Result_) {
        if status == 0 {
            return;
        }
        let error_name: unsafe extern "C" fn(Result_, *mut *const c_char) -> Result_ =
            unsafe { std::mem::transmute(self.symbol("cuGetErrorName")) };
        let mut name: *const c_char = std::ptr::null();
        let known = unsafe { error_name(status, &mut name) } == 0 && !name.is_null();
        let name = if known { unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned() } else { "unknown".into() };
        fail(1, &format!("{what} failed: CUresult {status} ({name})"));
    }
}

fn read_floats(path: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|error| fail(2, &format!("{path}: {error}")));
    if bytes.is_empty() || bytes.len() % 4 != 0 {
        fail(2, &format!("{path}: {} bytes, not a whole number (>0) of float32", bytes.len()));
    }
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn parse_float(what: &str, text: &str) -> f32 {
    text.parse().unwrap_or_else(|_| fail(2, &format!("{what} {text:?}: not a number")))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        fail(2, "usage: kernelpack-export-launch INPUT OUTPUT MUL ADD");
    }
    let input = read_floats(&args[1]);
    let (mul, add) = (parse_float("MUL", &args[3]), parse_float("ADD", &args[4]));
    let n = input.len();
    let bytes = n * 4;
    let cuda = Cuda::open();
    unsafe {
        let init: unsafe extern "C" fn(c_uint) -> Result_ = std::mem::transmute(cuda.symbol("cuInit"));
        let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> Result_ =
            std::mem::transmute(cuda.symbol("cuDeviceGet"));
        let attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> Result_ =
            std::mem::transmute(cuda.symbol("cuDeviceGetAttribute"));
        let retain: unsafe extern "C" fn(*mut Ptr, c_int) -> Result_ =
            std::mem::transmute(cuda.symbol("cuDevicePrimaryCtxRetain"));
        let set_current: unsafe extern "C" fn(Ptr) -> Result_ = std::mem::transmute(cuda.symbol("cuCtxSetCurrent"));
        let load_data: unsafe extern "C" fn(*mut Ptr, *const c_void) -> Result_ =
            std::mem::transmute(cuda.symbol("cuModuleLoadData"));
        let get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> Result_ =
            std::mem::transmute(cuda.symbol("cuModuleGetFunction"));
        let alloc: unsafe extern "C" fn(*mut u64, usize) -> Result_ = std::mem::transmute(cuda.symbol("cuMemAlloc_v2"));
        let free: unsafe extern "C" fn(u64) -> Result_ = std::mem::transmute(cuda.symbol("cuMemFree_v2"));
        let memset: unsafe extern "C" fn(u64, c_uint, usize) -> Result_ =
            std::mem::transmute(cuda.symbol("cuMemsetD32_v2"));
        let to_device: unsafe extern "C" fn(u64, *const c_void, usize) -> Result_ =
            std::mem::transmute(cuda.symbol("cuMemcpyHtoD_v2"));
        let to_host: unsafe extern "C" fn(*mut c_void, u64, usize) -> Result_ =
            std::mem::transmute(cuda.symbol("cuMemcpyDtoH_v2"));
        #[allow(clippy::type_complexity)]
        let launch: unsafe extern "C" fn(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr) -> Result_ =
            std::mem::transmute(cuda.symbol("cuLaunchKernel"));
        let synchronize: unsafe extern "C" fn() -> Result_ = std::mem::transmute(cuda.symbol("cuCtxSynchronize"));

        cuda.check("cuInit", init(0));
        let mut device = 0;
        cuda.check("cuDeviceGet", device_get(&mut device, 0));
        let (mut major, mut minor) = (0, 0);
        cuda.check("cuDeviceGetAttribute", attribute(&mut major, COMPUTE_CAPABILITY_MAJOR, device));
        cuda.check("cuDeviceGetAttribute", attribute(&mut minor, COMPUTE_CAPABILITY_MINOR, device));
        let mut context = null_mut();
        cuda.check("cuDevicePrimaryCtxRetain", retain(&mut context, device));
        cuda.check("cuCtxSetCurrent", set_current(context));

        let capability = (major * 10 + minor) as u32;
        let image = kernels::AFFINE
            .select(capability)
            .unwrap_or_else(|| fail(1, &format!("no image of affine for compute capability {major}.{minor}")));
        let symbol = image
            .symbol("affine_f32")
            .unwrap_or_else(|| fail(1, &format!("affine_f32 is not in the {} image", image.target)));
        let symbol = CString::new(symbol).expect("a symbol without NUL");
        let mut module = null_mut();
        cuda.check("cuModuleLoadData", load_data(&mut module, image.bytes.as_ptr().cast()));
        let mut function = null_mut();
        cuda.check("cuModuleGetFunction", get_function(&mut function, module, symbol.as_ptr()));

        let (mut x, mut out) = (0u64, 0u64);
        cuda.check("cuMemAlloc", alloc(&mut x, bytes));
        cuda.check("cuMemAlloc", alloc(&mut out, bytes));
        cuda.check("cuMemcpyHtoD", to_device(x, input.as_ptr().cast(), bytes));
        cuda.check("cuMemsetD32", memset(out, POISON, n));
        // affine_f32(numel, num_dims, info, inp, out, mul, add); info NULL: contiguous, as candle
        // passes it for a contiguous layout (SlicePtrOrNull::Null)
        let (mut numel, mut dims, mut info) = (n, 1usize, 0u64);
        let (mut mul, mut add) = (mul, add);
        let mut params: [Ptr; 7] = [
            (&mut numel as *mut usize).cast(),
            (&mut dims as *mut usize).cast(),
            (&mut info as *mut u64).cast(),
            (&mut x as *mut u64).cast(),
            (&mut out as *mut u64).cast(),
            (&mut mul as *mut f32).cast(),
            (&mut add as *mut f32).cast(),
        ];
        let blocks = n.div_ceil(256) as c_uint;
        cuda.check(
            "cuLaunchKernel",
            launch(function, blocks, 1, 1, 256, 1, 1, 0, null_mut(), params.as_mut_ptr(), null_mut()),
        );
        cuda.check("cuCtxSynchronize", synchronize());
        let mut result = vec![0f32; n];
        cuda.check("cuMemcpyDtoH", to_host(result.as_mut_ptr().cast(), out, bytes));
        cuda.check("cuMemFree", free(x));
        cuda.check("cuMemFree", free(out));
        let written: Vec<u8> = result.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&args[2], written).unwrap_or_else(|error| fail(2, &format!("{}: {error}", args[2])));
        println!("{} {} for {major}.{minor}", image.target, if image.kind == kernels::NvidiaKind::Ptx { "ptx" } else { "cubin" });
    }
}
