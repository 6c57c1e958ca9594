// Compares a kernelpack Rust export with expectations: `kernelpack-export-check EXPECTED`, where
// EXPECTED holds one tab-separated line per fact (tests/test_export.py writes it from `kernelpack
// inspect`, sha256 of the files and the selection rules). The program prints the same lines from
// the tables it was built with, hashing the embedded bytes itself, and exits 1 on any difference.
#![deny(warnings)]

mod kernels {
    include!(concat!(env!("OUT_DIR"), "/kernelpack/kernels.rs"));
}

use kernels::{Kernel, NvidiaKind};

mod sha256 {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ];

    /// FIPS 180-4 SHA-256 of `data`, in lower-case hex.
    pub fn hex(data: &[u8]) -> String {
        let mut h: [u32; 8] = [
            0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
        ];
        let mut message = data.to_vec();
        message.push(0x80);
        while message.len() % 64 != 56 {
            message.push(0);
        }
        message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
        for block in message.chunks(64) {
            let mut w = [0u32; 64];
            for i in 0..16 {
                w[i] = u32::from_be_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]);
            }
            for i in 16..64 {
                let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
                let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
                w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
            }
            let mut v = h;
            for i in 0..64 {
                let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
                let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
                let t1 = v[7].wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
                let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
                let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
                let t2 = s0.wrapping_add(maj);
                v = [t1.wrapping_add(t2), v[0], v[1], v[2], v[3].wrapping_add(t1), v[4], v[5], v[6]];
            }
            for i in 0..8 {
                h[i] = h[i].wrapping_add(v[i]);
            }
        }
        h.iter().map(|word| format!("{word:08x}")).collect()
    }
}

fn symbols(lines: &mut Vec<String>, tag: &str, module: &str, target: &str, kernels: &[Kernel], lookup: impl Fn(&str) -> Option<&'static str>) {
    for kernel in kernels {
        lines.push(format!("{tag}\t{module}\t{target}\t{}\t{}", kernel.name, kernel.symbol));
        if lookup(kernel.name) != Some(kernel.symbol) {
            lines.push(format!("symbol lookup fails\t{module}\t{target}\t{}", kernel.name));
        }
    }
}

fn observed(capabilities: &[u32]) -> Vec<String> {
    let mut lines = vec![format!("modules\t{}", kernels::ALL.len())];
    for (position, module) in kernels::ALL.iter().enumerate() {
        let name = module.name;
        lines.push(format!("module\t{name}\t{}\t{position}", module.index));
        for kernel in module.kernels {
            lines.push(format!("kernel\t{name}\t{kernel}"));
            if !module.has_kernel(kernel) {
                lines.push(format!("has_kernel fails\t{name}\t{kernel}"));
            }
        }
        if let Some(bundle) = module.amd {
            let computed = sha256::hex(bundle.bytes);
            lines.push(format!(
                "amd\t{name}\t{}\t{}\t{}\t{}\t{computed}\t{}",
                bundle.file, bundle.compression, bundle.bytes.len(), bundle.sha256, bundle.bytes.as_ptr() as usize % 16
            ));
            for image in bundle.images {
                lines.push(format!("amd-image\t{name}\t{}\t{}\t{}\t{}", image.target, image.offset, image.size, image.sha256));
                symbols(&mut lines, "amd-symbol", name, image.target, image.kernels, |k| image.symbol(k));
            }
            symbols(&mut lines, "amd-bundle-symbol", name, "*", bundle.kernels, |k| bundle.symbol(k));
        }
        for image in module.nvidia {
            let kind = match image.kind {
                NvidiaKind::Cubin => "cubin",
                NvidiaKind::Ptx => "ptx",
            };
            let computed = sha256::hex(image.bytes);
            lines.push(format!(
                "nvidia\t{name}\t{}\t{kind}\t{}\t{}\t{}\t{computed}",
                image.target, image.file, image.bytes.len(), image.sha256
            ));
            if image.kind == NvidiaKind::Ptx {
                // the NUL the driver needs, right after the text (kernels.rs promises it)
                let nul = unsafe { *image.bytes.as_ptr().add(image.bytes.len()) };
                lines.push(format!("ptx-nul\t{name}\t{}\t{nul}", image.target));
            } else {
                lines.push(format!("aligned\t{name}\t{}\t{}", image.target, image.bytes.as_ptr() as usize % 16));
            }
            symbols(&mut lines, "nvidia-symbol", name, image.target, image.kernels, |k| image.symbol(k));
        }
        for &capability in capabilities {
            let chosen = module.select(capability).map_or("-", |image| image.target);
            lines.push(format!("select\t{name}\t{capability}\t{chosen}"));
        }
    }
    lines
}

fn main() {
    assert_eq!(sha256::hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let path = std::env::args().nth(1).expect("usage: kernelpack-export-check EXPECTED");
    let text = std::fs::read_to_string(&path).expect("the expectations file");
    let mut expected: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(String::from).collect();
    let mut capabilities: Vec<u32> = expected
        .iter()
        .filter_map(|line| line.strip_prefix("select\t"))
        .map(|rest| rest.split('\t').nth(1).expect("select\tMODULE\tCC\tTARGET").parse().expect("a capability"))
        .collect();
    capabilities.sort_unstable();
    capabilities.dedup();
    let mut found = observed(&capabilities);
    expected.sort();
    found.sort();
    let missing: Vec<&String> = expected.iter().filter(|l| found.binary_search(l).is_err()).collect();
    let unexpected: Vec<&String> = found.iter().filter(|l| expected.binary_search(l).is_err()).collect();
    for line in &missing {
        println!("expected, not in the tables: {line}");
    }
    for line in &unexpected {
        println!("in the tables, not expected: {line}");
    }
    if !missing.is_empty() || !unexpected.is_empty() {
        std::process::exit(1);
    }
    println!("ok: {} lines agree", found.len());
}
