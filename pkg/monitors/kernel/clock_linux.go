package kernel

import "golang.org/x/sys/unix"

// SystemTimex reads the running kernel's NTP state with adjtimex(2), modes 0:
// read-only, no capability needed. The clock is not namespaced, so inside a
// container it is the host's.
type SystemTimex struct{}

// ReadTimex implements TimexReader.
func (SystemTimex) ReadTimex() (Timex, error) {
	var tx unix.Timex // Modes 0: read only
	if _, err := unix.Adjtimex(&tx); err != nil {
		return Timex{}, err
	}
	return Timex{
		Status:         int64(tx.Status),
		MaxErrorMicros: int64(tx.Maxerror),
		EstErrorMicros: int64(tx.Esterror),
	}, nil
}
