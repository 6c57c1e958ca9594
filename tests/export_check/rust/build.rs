// The build.rs of docs/rust.md: the export goes into OUT_DIR/kernelpack, either copied from a
// prebuilt folder (KERNELPACK_EXPORT_DIR, made by `python -m buildsys export --lang rust`) or made
// here by running the exporter (KERNELPACK_PYTHON, default python3; KERNELPACK_PROJECT, the kernel
// project; build settings from the KERNELPACK_BUILD_* variables the exporter reads itself).
use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("kernelpack");
    fs::create_dir_all(&out).expect("OUT_DIR/kernelpack");
    for variable in ["KERNELPACK_EXPORT_DIR", "KERNELPACK_PROJECT", "KERNELPACK_PYTHON"] {
        println!("cargo:rerun-if-env-changed={variable}");
    }
    if let Some(prebuilt) = env::var_os("KERNELPACK_EXPORT_DIR") {
        let prebuilt = PathBuf::from(prebuilt);
        println!("cargo:rerun-if-changed={}", prebuilt.display());
        for entry in fs::read_dir(&prebuilt).expect("KERNELPACK_EXPORT_DIR: a folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_file() {
                fs::copy(&path, out.join(path.file_name().expect("a file name"))).expect("copy");
            }
        }
        return;
    }
    let project = env::var_os("KERNELPACK_PROJECT").expect("KERNELPACK_PROJECT or KERNELPACK_EXPORT_DIR");
    let python = env::var_os("KERNELPACK_PYTHON").unwrap_or_else(|| "python3".into());
    println!("cargo:rerun-if-changed={}", PathBuf::from(&project).join("kernel_sources").display());
    let status = Command::new(python)
        .args(["-m", "buildsys", "export", "--lang", "rust", "--out"])
        .arg(&out)
        .arg("--project")
        .arg(&project)
        .status()
        .expect("run python -m buildsys export");
    assert!(status.success(), "python -m buildsys export failed: {status}");
}
