/* Compares a kernelpack C export with expectations, as tests/export_check/rust does for Rust:
 * `check EXPECTED` prints nothing but the differences between the tab-separated lines of EXPECTED
 * and the same lines made from the tables kernels.c holds (hashing the embedded bytes itself),
 * and exits 1 on any difference. */
#include "kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64], v[8], t1, t2;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (i = 16; i < 64; i++)
        w[i] = w[i - 16] + (ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3)) + w[i - 7]
             + (ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10));
    memcpy(v, h, sizeof v);
    for (i = 0; i < 64; i++) {
        t1 = v[7] + (ROTR(v[4], 6) ^ ROTR(v[4], 11) ^ ROTR(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) + K[i] + w[i];
        t2 = (ROTR(v[0], 2) ^ ROTR(v[0], 13) ^ ROTR(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof v[0]);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (i = 0; i < 8; i++)
        h[i] += v[i];
}

/* FIPS 180-4 SHA-256 of data, as 64 lower-case hex digits into hex[65]. */
static void sha256_hex(const unsigned char *data, size_t size, char hex[65])
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    unsigned char tail[128];
    size_t done = 0, rest, length;
    uint64_t bits = (uint64_t)size * 8;
    int i;
    for (; size - done >= 64; done += 64)
        block(h, data + done);
    rest = size - done;
    memset(tail, 0, sizeof tail);
    memcpy(tail, data + done, rest);
    tail[rest] = 0x80;
    length = rest + 1 + 8 <= 64 ? 64 : 128;
    for (i = 0; i < 8; i++)
        tail[length - 1 - i] = (unsigned char)(bits >> (8 * i));
    block(h, tail);
    if (length == 128)
        block(h, tail + 64);
    for (i = 0; i < 8; i++)
        sprintf(hex + 8 * i, "%08lx", (unsigned long)h[i]);
}

static char **lines;
static size_t count, room;

static void add(const char *format, ...);

#include <stdarg.h>

static void add(const char *format, ...)
{
    va_list args;
    char buffer[4096];
    va_start(args, format);
    vsnprintf(buffer, sizeof buffer, format, args);
    va_end(args);
    if (count == room) {
        room = room ? 2 * room : 256;
        lines = (char **)realloc(lines, room * sizeof *lines);
    }
    lines[count] = (char *)malloc(strlen(buffer) + 1);
    strcpy(lines[count++], buffer);
}

static void symbols(const char *tag, const char *module, const char *target, const kernelpack_kernel *kernels, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        const char *found = kernelpack_symbol(kernels, n, kernels[i].name);
        add("%s\t%s\t%s\t%s\t%s", tag, module, target, kernels[i].name, kernels[i].symbol);
        if (found == NULL || strcmp(found, kernels[i].symbol) != 0)
            add("symbol lookup fails\t%s\t%s\t%s", module, target, kernels[i].name);
    }
}

static void observe(const unsigned *capabilities, size_t ncap)
{
    size_t m, i;
    char hex[65];
    add("modules\t%lu", (unsigned long)kernelpack_MODULE_COUNT);
    for (m = 0; m < kernelpack_MODULE_COUNT; m++) {
        const kernelpack_module *module = kernelpack_ALL[m];
        const char *name = module->name;
        add("module\t%s\t%lu\t%lu", name, (unsigned long)module->index, (unsigned long)m);
        for (i = 0; i < module->kernel_count; i++) {
            add("kernel\t%s\t%s", name, module->kernels[i]);
            if (!kernelpack_has_kernel(module, module->kernels[i]))
                add("has_kernel fails\t%s\t%s", name, module->kernels[i]);
        }
        if (module->amd != NULL) {
            const kernelpack_amd_bundle *bundle = module->amd;
            sha256_hex(bundle->bytes, bundle->size, hex);
            add("amd\t%s\t%s\t%s\t%lu\t%s\t%s\t%lu", name, bundle->file, bundle->compression, (unsigned long)bundle->size,
                bundle->sha256, hex, (unsigned long)((uintptr_t)bundle->bytes % 16));
            for (i = 0; i < bundle->image_count; i++) {
                const kernelpack_amd_image *image = &bundle->images[i];
                add("amd-image\t%s\t%s\t%lu\t%lu\t%s", name, image->target, (unsigned long)image->offset,
                    (unsigned long)image->size, image->sha256);
                symbols("amd-symbol", name, image->target, image->kernels, image->kernel_count);
            }
            symbols("amd-bundle-symbol", name, "*", bundle->kernels, bundle->kernel_count);
        }
        for (i = 0; i < module->nvidia_count; i++) {
            const kernelpack_nvidia_image *image = &module->nvidia[i];
            int ptx = image->kind == kernelpack_KIND_PTX;
            sha256_hex(image->bytes, image->size, hex);
            add("nvidia\t%s\t%s\t%s\t%s\t%lu\t%s\t%s", name, image->target, ptx ? "ptx" : "cubin", image->file,
                (unsigned long)image->size, image->sha256, hex);
            if (ptx)
                add("ptx-nul\t%s\t%s\t%d", name, image->target, image->bytes[image->size]);
            else
                add("aligned\t%s\t%s\t%lu", name, image->target, (unsigned long)((uintptr_t)image->bytes % 16));
            symbols("nvidia-symbol", name, image->target, image->kernels, image->kernel_count);
        }
        for (i = 0; i < ncap; i++) {
            const kernelpack_nvidia_image *chosen = kernelpack_select(module, capabilities[i]);
            add("select\t%s\t%u\t%s", name, capabilities[i], chosen ? chosen->target : "-");
        }
    }
}

static int compare(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int contains(char **sorted, size_t n, const char *line)
{
    return bsearch(&line, sorted, n, sizeof *sorted, compare) != NULL;
}

int main(int argc, char **argv)
{
    static const unsigned char abc[] = "abc";
    char hex[65], *text, *line, **expected;
    unsigned capabilities[256];
    size_t ncap = 0, nexpected, i, j, differences = 0;
    long size;
    FILE *file;
    sha256_hex(abc, 3, hex);
    if (strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") != 0) {
        printf("sha256 self-test failed: %s\n", hex);
        return 2;
    }
    if (argc != 2 || (file = fopen(argv[1], "rb")) == NULL) {
        printf("usage: check EXPECTED\n");
        return 2;
    }
    fseek(file, 0, SEEK_END);
    size = ftell(file);
    rewind(file);
    text = (char *)malloc((size_t)size + 1);
    if (fread(text, 1, (size_t)size, file) != (size_t)size)
        return 2;
    text[size] = '\0';
    fclose(file);
    for (line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        add("%s", line);
        if (strncmp(line, "select\t", 7) == 0) {
            const char *cc = strchr(line + 7, '\t');
            unsigned value = (unsigned)strtoul(cc + 1, NULL, 10);
            for (j = 0; j < ncap && capabilities[j] != value; j++)
                ;
            if (j == ncap && ncap < 256)
                capabilities[ncap++] = value;
        }
    }
    expected = lines;
    nexpected = count;
    lines = NULL;
    count = room = 0;
    observe(capabilities, ncap);
    qsort(expected, nexpected, sizeof *expected, compare);
    qsort(lines, count, sizeof *lines, compare);
    for (i = 0; i < nexpected; i++)
        if (!contains(lines, count, expected[i])) {
            printf("expected, not in the tables: %s\n", expected[i]);
            differences++;
        }
    for (i = 0; i < count; i++)
        if (!contains(expected, nexpected, lines[i])) {
            printf("in the tables, not expected: %s\n", lines[i]);
            differences++;
        }
    if (differences)
        return 1;
    printf("ok: %lu lines agree\n", (unsigned long)count);
    return 0;
}
