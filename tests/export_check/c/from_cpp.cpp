// kernels.h from C++: the tables and functions of the C export, linked from kernels.c compiled as
// C (extern "C"). Prints each module's name and the image selected for compute capability 9.0.
#include "kernels.h"

#include <cstdio>

int main()
{
    for (size_t m = 0; m < kernelpack_MODULE_COUNT; ++m) {
        const kernelpack_module *module = kernelpack_ALL[m];
        const kernelpack_nvidia_image *image = kernelpack_select(module, 90);
        std::printf("%s\t%s\n", module->name, image ? image->target : "-");
    }
    return 0;
}
