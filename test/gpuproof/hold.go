package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/test/gpuproof/cuda"
)

// hold is the helper process: it makes the primary context of one card
// current, then takes commands on stdin, one per line, answering each on
// stdout with one line:
//
//	alloc MiB   -> "ok MiB free=BYTES" or "err NAME CODE"
//	free        -> "ok 0 free=BYTES" (every allocation freed)
//
// Its first line is "ready pid=PID free=BYTES total=BYTES" or "err ...".
// It exits when stdin closes. With sim it touches no driver and answers as
// if every allocation succeeded (the dry run's simulated card).
func hold(card int, sim bool, in io.Reader, out io.Writer) error {
	runtime.LockOSThread() // the CUDA context is current on this thread
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	memFree := func() uint64 {
		if sim {
			return 0
		}
		f, _, _ := cuda.MemInfo()
		return f
	}
	if !sim {
		if err := cuda.Open(); err != nil {
			say("err %v", err)
			return err
		}
		if err := cuda.Context(card); err != nil {
			say("err %v", err)
			return err
		}
	}
	f, t := uint64(0), uint64(0)
	if !sim {
		f, t, _ = cuda.MemInfo()
	}
	say("ready pid=%d free=%d total=%d", os.Getpid(), f, t)
	var held []uintptr
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch cmd {
		case "alloc":
			mib, err := strconv.ParseUint(arg, 10, 32)
			if err != nil {
				say("err bad-size 0")
				continue
			}
			if sim {
				say("ok %d free=0", mib)
				continue
			}
			p, err := cuda.Alloc(mib << 20)
			if err != nil {
				var ce *cuda.Error
				if errors.As(err, &ce) {
					say("err %s %d", ce.Name, ce.Code)
				} else {
					say("err %v 0", err)
				}
				continue
			}
			held = append(held, p)
			say("ok %d free=%d", mib, memFree())
		case "free":
			for _, p := range held {
				_ = cuda.Free(p)
			}
			held = nil
			say("ok 0 free=%d", memFree())
		default:
			say("err unknown-command 0")
		}
	}
	return nil
}
