//go:build !linux

package kernel

import "errors"

// SystemTimex reads the kernel's NTP state with adjtimex(2), which exists
// only on Linux.
type SystemTimex struct{}

// ReadTimex implements TimexReader.
func (SystemTimex) ReadTimex() (Timex, error) {
	return Timex{}, errors.New("adjtimex is only available on Linux")
}
