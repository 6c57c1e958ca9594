// `kernelpack-export-launch INPUT OUTPUT MUL ADD`: candle's affine_f32 on the GPU from the image
// the export's select() picks for it. INPUT holds n float32 values (little-endian); OUTPUT gets
// out[i] = INPUT[i] * MUL + ADD as the kernel computed it. libcuda is opened at run time (dlopen),
// so the binary builds on a machine without a driver. Prints the image it loaded.
#![deny(warnings)]

mod kernels {
    include!(concat!(env!("OUT_DIR"), "/kernelpack/kernels.rs"));
}

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::ptr::null_mut;

extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;
const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const COMPUTE_CAPABILITY_MINOR: c_int = 76;

type Result_ = c_int;
type Ptr = *mut c_void;

struct Cuda {
    library: Ptr,
}

impl Cuda {
    fn open() -> Cuda {
        let library = unsafe { dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW) };
        assert!(!library.is_null(), "libcuda.so.1 cannot be opened: no NVIDIA driver");
        Cuda { library }
    }

    fn symbol(&self, name: &str) -> Ptr {
        let name_c = CString::new(name).unwrap();
        let found = unsafe { dlsym(self.library, name_c.as_ptr()) };
        assert!(!found.is_null(), "libcuda has no {name}");
        found
    }
}

fn check(what: &str, status: Result_) {
    assert_eq!(status, 0, "{what} failed: CUresult {status}");
}

fn read_floats(path: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("the input file");
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(args.len(), 5, "usage: kernelpack-export-launch INPUT OUTPUT MUL ADD");
    let input = read_floats(&args[1]);
    let (mul, add): (f32, f32) = (args[3].parse().unwrap(), args[4].parse().unwrap());
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
        let to_device: unsafe extern "C" fn(u64, *const c_void, usize) -> Result_ =
            std::mem::transmute(cuda.symbol("cuMemcpyHtoD_v2"));
        let to_host: unsafe extern "C" fn(*mut c_void, u64, usize) -> Result_ =
            std::mem::transmute(cuda.symbol("cuMemcpyDtoH_v2"));
        #[allow(clippy::type_complexity)]
        let launch: unsafe extern "C" fn(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr) -> Result_ =
            std::mem::transmute(cuda.symbol("cuLaunchKernel"));
        let synchronize: unsafe extern "C" fn() -> Result_ = std::mem::transmute(cuda.symbol("cuCtxSynchronize"));

        check("cuInit", init(0));
        let mut device = 0;
        check("cuDeviceGet", device_get(&mut device, 0));
        let (mut major, mut minor) = (0, 0);
        check("cuDeviceGetAttribute", attribute(&mut major, COMPUTE_CAPABILITY_MAJOR, device));
        check("cuDeviceGetAttribute", attribute(&mut minor, COMPUTE_CAPABILITY_MINOR, device));
        let mut context = null_mut();
        check("cuDevicePrimaryCtxRetain", retain(&mut context, device));
        check("cuCtxSetCurrent", set_current(context));

        let capability = (major * 10 + minor) as u32;
        let image = kernels::AFFINE.select(capability).expect("no image of affine for this GPU");
        let symbol = CString::new(image.symbol("affine_f32").expect("affine_f32 in the image")).unwrap();
        let mut module = null_mut();
        check("cuModuleLoadData", load_data(&mut module, image.bytes.as_ptr().cast()));
        let mut function = null_mut();
        check("cuModuleGetFunction", get_function(&mut function, module, symbol.as_ptr()));

        let (mut x, mut out) = (0u64, 0u64);
        check("cuMemAlloc", alloc(&mut x, bytes));
        check("cuMemAlloc", alloc(&mut out, bytes));
        check("cuMemcpyHtoD", to_device(x, input.as_ptr().cast(), bytes));
        // affine_f32(numel, num_dims, info, inp, out, mul, add); info NULL: contiguous
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
        check("cuLaunchKernel", launch(function, blocks, 1, 1, 256, 1, 1, 0, null_mut(), params.as_mut_ptr(), null_mut()));
        check("cuCtxSynchronize", synchronize());
        let mut result = vec![0f32; n];
        check("cuMemcpyDtoH", to_host(result.as_mut_ptr().cast(), out, bytes));
        check("cuMemFree", free(x));
        check("cuMemFree", free(out));
        let written: Vec<u8> = result.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&args[2], written).expect("the output file");
        println!("{} {} for {major}.{minor}", image.target, if image.kind == kernels::NvidiaKind::Ptx { "ptx" } else { "cubin" });
    }
}
