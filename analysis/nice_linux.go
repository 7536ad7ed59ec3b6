//go:build linux

package analysis

import (
	"errors"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// niceThread pins the calling goroutine to an OS thread for the rest of
// its life and runs that thread at nice n; Go ends the thread with the
// goroutine, so no other goroutine ever runs at that priority. Lowering a
// thread's priority needs no privilege. The process's main thread is
// avoided: Go never ends it (a goroutine exiting locked to it leaves it
// parked), so it would stay niced.
func niceThread(n int) error {
	for range 100 {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), n)
		}
		runtime.UnlockOSThread()
		time.Sleep(time.Millisecond) // resume, most likely on another thread
	}
	return errors.New("kept running on the main thread")
}
