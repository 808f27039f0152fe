package storage

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// nvmeAdminCmd is struct nvme_passthru_cmd (struct nvme_admin_cmd) of
// include/uapi/linux/nvme_ioctl.h: 72 bytes.
type nvmeAdminCmd struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	CDW2        uint32
	CDW3        uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	CDW10       uint32
	CDW11       uint32
	CDW12       uint32
	CDW13       uint32
	CDW14       uint32
	CDW15       uint32
	TimeoutMs   uint32
	Result      uint32
}

const (
	// nvmeIoctlAdminCmd is NVME_IOCTL_ADMIN_CMD, _IOWR('N', 0x41, struct nvme_admin_cmd).
	nvmeIoctlAdminCmd = 0xC0484E41
	// nvmeAdminGetLogPage is the Get Log Page admin opcode (NVMe base
	// specification, section 5.16).
	nvmeAdminGetLogPage = 0x02
	// nvmeNSIDAll addresses the controller, not a namespace.
	nvmeNSIDAll = 0xFFFFFFFF
)

// NVMeAdmin reads log pages with the NVMe admin passthrough ioctl on the
// controller's character device, as nvme-cli does. It needs CAP_SYS_ADMIN.
type NVMeAdmin struct{}

// ReadLogPage implements LogPageReader.
func (NVMeAdmin) ReadLogPage(device string, id uint8, buf []byte) error {
	if len(buf) == 0 || len(buf)%4 != 0 || len(buf) > 1<<18 {
		return fmt.Errorf("log page buffer of %d bytes: want a positive multiple of 4", len(buf))
	}
	f, err := os.OpenFile(device, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := nvmeAdminCmd{
		Opcode:  nvmeAdminGetLogPage,
		NSID:    nvmeNSIDAll,
		Addr:    uint64(uintptr(unsafe.Pointer(&buf[0]))),
		DataLen: uint32(len(buf)),
		// CDW10: number of dwords minus one (NUMDL) in bits 31:16, the log
		// page identifier in bits 7:0.
		CDW10: uint32(len(buf)/4-1)<<16 | uint32(id),
	}
	status, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return fmt.Errorf("NVMe admin Get Log Page 0x%02X on %s: %w", id, device, errno)
	}
	// A positive return is the NVMe completion status: the controller
	// refused (a volume without the page answers Invalid Log Page, 0x109).
	if status != 0 {
		return fmt.Errorf("NVMe admin Get Log Page 0x%02X on %s: NVMe status 0x%X", id, device, status)
	}
	return nil
}
