// Package cuda reaches the NVIDIA driver API (libcuda.so.1, which the driver
// ships) through dlopen from cgo, so that the GPU proof can create a context
// and allocate a known amount of card memory on a machine with the driver but
// no CUDA toolkit. It loads only the handful of entry points the proof needs.
package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { char bytes[16]; } CUuuid;

static void *lib;
static CUresult (*p_init)(unsigned int);
static CUresult (*p_driverVersion)(int *);
static CUresult (*p_count)(int *);
static CUresult (*p_get)(CUdevice *, int);
static CUresult (*p_name)(char *, int, CUdevice);
static CUresult (*p_uuid)(CUuuid *, CUdevice);
static CUresult (*p_totalMem)(size_t *, CUdevice);
static CUresult (*p_retain)(CUcontext *, CUdevice);
static CUresult (*p_setCurrent)(CUcontext);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_free)(CUdeviceptr);
static CUresult (*p_memInfo)(size_t *, size_t *);
static CUresult (*p_errName)(CUresult, const char **);

static void *sym2(const char *a, const char *b) {
	void *p = dlsym(lib, a);
	if (!p && b) p = dlsym(lib, b);
	return p;
}

// gp_open returns NULL on success, else the name of what is missing.
static const char *gp_open(void) {
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!lib) return "libcuda.so.1";
#define LOAD(var, a, b) if (!(var = sym2(a, b))) return a;
	LOAD(p_init, "cuInit", NULL)
	LOAD(p_driverVersion, "cuDriverGetVersion", NULL)
	LOAD(p_count, "cuDeviceGetCount", NULL)
	LOAD(p_get, "cuDeviceGet", NULL)
	LOAD(p_name, "cuDeviceGetName", NULL)
	LOAD(p_uuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid")
	LOAD(p_totalMem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem")
	LOAD(p_retain, "cuDevicePrimaryCtxRetain", NULL)
	LOAD(p_setCurrent, "cuCtxSetCurrent", NULL)
	LOAD(p_alloc, "cuMemAlloc_v2", "cuMemAlloc")
	LOAD(p_free, "cuMemFree_v2", "cuMemFree")
	LOAD(p_memInfo, "cuMemGetInfo_v2", "cuMemGetInfo")
	LOAD(p_errName, "cuGetErrorName", NULL)
#undef LOAD
	return NULL;
}

static CUresult gp_init(void) { return p_init(0); }
static CUresult gp_driver_version(int *v) { return p_driverVersion(v); }
static CUresult gp_count(int *n) { return p_count(n); }
static CUresult gp_name(int ordinal, char *buf, int len) {
	CUdevice d; CUresult r = p_get(&d, ordinal); if (r) return r;
	return p_name(buf, len, d);
}
static CUresult gp_uuid(int ordinal, unsigned char *out) {
	CUdevice d; CUresult r = p_get(&d, ordinal); if (r) return r;
	CUuuid u; r = p_uuid(&u, d); if (r) return r;
	for (int i = 0; i < 16; i++) out[i] = (unsigned char)u.bytes[i];
	return 0;
}
static CUresult gp_total_mem(int ordinal, size_t *b) {
	CUdevice d; CUresult r = p_get(&d, ordinal); if (r) return r;
	return p_totalMem(b, d);
}
static CUresult gp_context(int ordinal) {
	CUdevice d; CUresult r = p_get(&d, ordinal); if (r) return r;
	CUcontext c; r = p_retain(&c, d); if (r) return r;
	return p_setCurrent(c);
}
static CUresult gp_alloc(size_t bytes, CUdeviceptr *p) { return p_alloc(p, bytes); }
static CUresult gp_free(CUdeviceptr p) { return p_free(p); }
static CUresult gp_mem_info(size_t *free, size_t *total) { return p_memInfo(free, total); }
static const char *gp_err_name(CUresult r) {
	const char *s = NULL;
	if (p_errName(r, &s) != 0 || !s) return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
)

// ErrNoDriver is returned (wrapped) when libcuda.so.1 or one of its entry
// points cannot be loaded: the machine has no NVIDIA driver.
var ErrNoDriver = errors.New("the NVIDIA driver API (libcuda.so.1) is not available")

// Error is a CUresult other than CUDA_SUCCESS.
type Error struct {
	Call string
	Code int
	Name string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code) }

// ErrorOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY's code.
const ErrorOutOfMemory = 2

// IsOutOfMemory reports whether err is CUDA_ERROR_OUT_OF_MEMORY.
func IsOutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == ErrorOutOfMemory
}

func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: C.GoString(C.gp_err_name(r))}
}

var (
	openOnce sync.Once
	openErr  error
)

// Open loads libcuda.so.1 and calls cuInit.
func Open() error {
	openOnce.Do(func() {
		if missing := C.gp_open(); missing != nil {
			openErr = fmt.Errorf("%w: cannot load %s", ErrNoDriver, C.GoString(missing))
			return
		}
		openErr = check("cuInit", C.gp_init())
	})
	return openErr
}

// DriverVersion is cuDriverGetVersion: 1000*major + 10*minor (13000 is 13.0).
func DriverVersion() (int, error) {
	var v C.int
	err := check("cuDriverGetVersion", C.gp_driver_version(&v))
	return int(v), err
}

// Device is what the driver API says of one card.
type Device struct {
	Ordinal    int
	Name       string
	UUID       string // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML writes it
	TotalBytes uint64
}

// Devices lists the cards the driver API sees (CUDA_VISIBLE_DEVICES applies).
func Devices() ([]Device, error) {
	var n C.int
	if err := check("cuDeviceGetCount", C.gp_count(&n)); err != nil {
		return nil, err
	}
	out := make([]Device, 0, int(n))
	for i := 0; i < int(n); i++ {
		var name [256]C.char
		if err := check("cuDeviceGetName", C.gp_name(C.int(i), &name[0], C.int(len(name)))); err != nil {
			return nil, err
		}
		var u [16]C.uchar
		if err := check("cuDeviceGetUuid", C.gp_uuid(C.int(i), &u[0])); err != nil {
			return nil, err
		}
		var b [16]byte
		for j := range b {
			b[j] = byte(u[j])
		}
		var total C.size_t
		if err := check("cuDeviceTotalMem", C.gp_total_mem(C.int(i), &total)); err != nil {
			return nil, err
		}
		out = append(out, Device{Ordinal: i, Name: C.GoString(&name[0]), UUID: FormatUUID(b), TotalBytes: uint64(total)})
	}
	return out, nil
}

// FormatUUID writes a CUuuid the way NVML does: "GPU-" and the 16 bytes as
// 8-4-4-4-12 hex digits.
func FormatUUID(b [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Context makes the primary context of the card with this ordinal current
// on the calling OS thread (lock it with runtime.LockOSThread first).
func Context(ordinal int) error {
	return check("cuDevicePrimaryCtxRetain/cuCtxSetCurrent", C.gp_context(C.int(ordinal)))
}

// Alloc allocates bytes of card memory in the current context.
func Alloc(bytes uint64) (uintptr, error) {
	var p C.CUdeviceptr
	if err := check("cuMemAlloc", C.gp_alloc(C.size_t(bytes), &p)); err != nil {
		return 0, err
	}
	return uintptr(p), nil
}

// Free frees an allocation of Alloc.
func Free(p uintptr) error { return check("cuMemFree", C.gp_free(C.CUdeviceptr(p))) }

// MemInfo is cuMemGetInfo in the current context: free and total bytes.
func MemInfo() (free, total uint64, err error) {
	var f, t C.size_t
	err = check("cuMemGetInfo", C.gp_mem_info(&f, &t))
	return uint64(f), uint64(t), err
}
