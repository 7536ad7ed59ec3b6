//go:build !linux

package analysis

import "errors"

// niceThread is Linux's only: elsewhere the assembler runs at the
// process's priority.
func niceThread(int) error { return errors.New("thread priorities are set on linux only") }
