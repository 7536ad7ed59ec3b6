package clickhouse

import (
	"syscall"
	"unsafe"
)

// The engine installs its own handlers for the fault signals (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGABRT, …) when it starts, over the Go
// runtime's. Go turns a nil dereference into a panic through its SIGSEGV
// handler; under the engine's, a recovered panic in any goroutine instead
// hung the process for five minutes and then killed it with "signal:
// segmentation fault" and no stack (TestGoPanicsSurviveTheEngine). Most
// of the engine's handlers also lack SA_ONSTACK, which Go requires of any
// handler that may run on a goroutine's stack. So the handlers Go had
// before the engine loaded are put back after every connect; a fault in
// an engine thread then gets Go's crash report, with its PC.

// kernelSigaction is struct sigaction as the rt_sigaction system call
// takes it on linux/amd64, libchdb's platform.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// maxSignal is the highest signal number on Linux.
const maxSignal = 64

type signalHandlers [maxSignal + 1]kernelSigaction

var goSignalHandlers signalHandlers

func (h *signalHandlers) save() {
	for sig := 1; sig <= maxSignal; sig++ {
		_ = sigaction(sig, nil, &h[sig])
	}
}

// restore puts back every handler that differs from the saved one.
func (h *signalHandlers) restore() {
	for sig := 1; sig <= maxSignal; sig++ {
		var now kernelSigaction
		if sigaction(sig, nil, &now) != nil || now == h[sig] {
			continue
		}
		_ = sigaction(sig, &h[sig], nil)
	}
}

func sigaction(sig int, act, old *kernelSigaction) error {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), unsafe.Sizeof(act.mask), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
