/* SPDX-License-Identifier: MIT */
/* Leaks on purpose, for tools/run-sanitized: it checks that LeakSanitizer, under the options
 * and suppressions (tools/lsan.supp) the sanitized tests run with, still reports leaks made
 * by our code. Where there is an OpenCL device, a kernel runs first (with an empty
 * POCL_CACHE_DIR, PoCL compiles it then, the leaks that tools/lsan.supp hides), and one of
 * the planted leaks is an OpenCL buffer never released: an allocation inside PoCL, made for
 * our code, which a suppression of PoCL's library as a whole would hide.
 *
 * Prints "opencl: DEVICE" or "opencl: none" and returns 0; under LeakSanitizer the process
 * then exits with LeakSanitizer's status, its report naming planted_malloc_leak and, with an
 * OpenCL device, planted_buffer_leak. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

/* The planted allocations pass through here and are dropped at once; volatile, so the
 * compiler keeps them. */
static void *volatile sink;

__attribute__((noinline)) void planted_malloc_leak(void) {
        sink = malloc(4000);
        memset(sink, 1, 4000);
        sink = NULL;
}

#ifdef HAVE_OPENCL
__attribute__((noinline)) void planted_buffer_leak(cl_context ctx) {
        cl_int e;
        sink = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &e);
        sink = NULL;
}

static cl_context ctx;

/* A kernel run to its end on device 0 of the first platform, every object released but the
 * context; false if there is none or it fails. */
static bool run_kernel(void) {
        static const char *src =
                "__kernel void add_one(__global float *x) { x[get_global_id(0)] += 1.0f; }";
        cl_platform_id p;
        cl_device_id d;
        cl_uint n;
        cl_int e;
        char name[256] = "";

        if (clGetPlatformIDs(1, &p, &n) != CL_SUCCESS || n == 0 ||
            clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, &n) != CL_SUCCESS || n == 0)
                return false;
        if (!(ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &e)))
                return false;
        cl_command_queue q = clCreateCommandQueue(ctx, d, 0, &e);
        cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
        cl_kernel k = NULL;
        cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * sizeof(float), NULL, &e);
        size_t global = 64;
        bool ok = q && prog && m && clBuildProgram(prog, 1, &d, "", NULL, NULL) == CL_SUCCESS &&
                  (k = clCreateKernel(prog, "add_one", &e)) &&
                  clSetKernelArg(k, 0, sizeof(m), &m) == CL_SUCCESS &&
                  clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL) ==
                          CL_SUCCESS &&
                  clFinish(q) == CL_SUCCESS;
        if (k)
                clReleaseKernel(k);
        if (m)
                clReleaseMemObject(m);
        if (prog)
                clReleaseProgram(prog);
        if (q)
                clReleaseCommandQueue(q);
        if (ok) {
                clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof(name) - 1, name, NULL);
                printf("opencl: %s\n", name);
        }
        return ok;
}
#endif

/* On a thread of its own, so that no stale copy of a planted pointer stays on a stack that
 * LeakSanitizer scans. */
static void *plant(void *arg) {
        planted_malloc_leak();
#ifdef HAVE_OPENCL
        if (arg)
                planted_buffer_leak(ctx);
#else
        (void) arg;
#endif
        return NULL;
}

int main(void) {
        bool opencl = false;
        pthread_t t;

#ifdef HAVE_OPENCL
        opencl = run_kernel();
#endif
        if (!opencl)
                printf("opencl: none\n");
        fflush(stdout);
        if (pthread_create(&t, NULL, plant, opencl ? &t : NULL) != 0 || pthread_join(t, NULL) != 0)
                return 2;
#ifdef HAVE_OPENCL
        if (ctx)
                clReleaseContext(ctx);
        ctx = NULL;
#endif
        return 0;
}
