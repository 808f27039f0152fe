package collectors

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"nodemend.dev/nodemend/pkg/diagnostics/collect"
	"nodemend.dev/nodemend/pkg/source/kmsg"
)

const catKernel = "kernel"

func kernel(e *Env) []collect.Collector {
	return []collect.Collector{
		{Name: "kernel/dmesg", Category: catKernel, Run: e.dmesg},
		filesCollector(e, catKernel, "logs", e.tail(), "var/log/kern.log", "var/log/kern.log.1", "var/log/dmesg", "var/log/dmesg.0"),
		filesCollector(e, catKernel, "state", 0, "proc/modules", "proc/sys/kernel/tainted", "proc/sys/kernel/panic",
			"proc/sys/kernel/printk", "proc/cmdline"),
	}
}

// dmesg writes the kernel ring buffer, read from <hostRoot>/dev/kmsg (the
// device without blocking at its end; a regular file in tests), with wall
// clock and boot-relative times.
func (e *Env) dmesg(ctx context.Context, out *collect.Output) error {
	path := e.hostPath("dev/kmsg")
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	boot := e.bootTime()
	dst, err := out.Create("dmesg.txt")
	if err != nil {
		return err
	}
	dst.SetSource("/dev/kmsg")
	w := bufio.NewWriterSize(dst, 64<<10)
	emit := func(rec []byte) error {
		_, err := w.Write(formatKmsg(rec, boot))
		return err
	}
	if st.Mode()&os.ModeCharDevice != 0 {
		err = readKmsgDevice(ctx, path, emit)
	} else {
		err = readKmsgFile(ctx, path, emit)
	}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if errors.Is(err, collect.ErrFileLimit) {
		err = nil
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// readKmsgDevice reads every record in the ring buffer and stops at its end:
// one read returns one record; EAGAIN means no more (O_NONBLOCK); EPIPE means
// records were overwritten while reading, and reading goes on.
func readKmsgDevice(ctx context.Context, path string, emit func([]byte) error) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 16<<10)
	for ctx.Err() == nil {
		n, err := syscall.Read(fd, buf)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return nil
		case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return nil
		}
		if err := emit(buf[:n]); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// readKmsgFile reads a file of records, one per line (dictionary lines,
// which start with a space, belong to the record before).
func readKmsgFile(ctx context.Context, path string, emit func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var rec []byte
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[0] == ' ' && len(rec) > 0 {
				rec = append(rec, line...)
			} else {
				if len(rec) > 0 {
					if err := emit(rec); err != nil {
						return err
					}
				}
				rec = append(rec[:0], line...)
			}
		}
		if err == io.EOF {
			if len(rec) > 0 {
				return emit(rec)
			}
			return nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// formatKmsg renders a record as "2024-06-12T10:00:01.123456Z [  350.123456] err: message"
// (wall time when the boot time is known), with dictionary lines below.
// Records that do not parse are kept verbatim.
func formatKmsg(rec []byte, boot time.Time) []byte {
	r, err := kmsg.Parse(rec)
	if err != nil {
		line := bytes.TrimRight(rec, "\n")
		return append(append([]byte(nil), line...), '\n')
	}
	var b bytes.Buffer
	if !boot.IsZero() {
		b.WriteString(boot.Add(r.Monotonic).UTC().Format("2006-01-02T15:04:05.000000Z "))
	}
	us := r.Monotonic.Microseconds()
	fmt.Fprintf(&b, "[%5d.%06d] %s: %s\n", us/1e6, us%1e6, levelName(r.Level), r.Message)
	for _, k := range sortedKeys(r.Dict) {
		fmt.Fprintf(&b, "    %s=%s\n", k, r.Dict[k])
	}
	return b.Bytes()
}

func levelName(l int) string {
	names := [...]string{"emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"}
	if l >= 0 && l < len(names) {
		return names[l]
	}
	return strconv.Itoa(l)
}

// bootTime reads btime from <hostRoot>/proc/stat; zero when unknown.
func (e *Env) bootTime() time.Time {
	data, err := os.ReadFile(e.hostPath("proc/stat"))
	if err != nil {
		return time.Time{}
	}
	return parseBtime(string(data))
}

func parseBtime(stat string) time.Time {
	for _, l := range strings.Split(stat, "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s > 0 {
				return time.Unix(s, 0)
			}
		}
	}
	return time.Time{}
}
