//go:build !linux

package storage

import "errors"

// NVMeAdmin reads NVMe log pages, which needs Linux's NVMe ioctls.
type NVMeAdmin struct{}

// ReadLogPage implements LogPageReader.
func (NVMeAdmin) ReadLogPage(string, uint8, []byte) error {
	return errors.New("NVMe admin commands need Linux")
}
