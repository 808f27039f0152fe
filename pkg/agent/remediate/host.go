package remediate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"nodemend.dev/nodemend/internal/command"
)

// BootIDPath is where Linux tells the current boot's ID, under the host
// root; the kubelet reports the same file as the Node's
// status.nodeInfo.bootID.
const BootIDPath = "proc/sys/kernel/random/boot_id"

// ReadBootID reads the host's boot ID under hostRoot.
func ReadBootID(hostRoot string) (string, error) {
	b, err := os.ReadFile(filepath.Join(hostRoot, BootIDPath))
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > 64 {
		return "", fmt.Errorf("%s: not a boot ID: %q", BootIDPath, id)
	}
	return id, nil
}

// Reboot mechanisms. None is the default: an agent reboots nothing unless
// its operator chose how.
const (
	MechanismNone    = "none"
	MechanismSystemd = "systemd"
	MechanismCommand = "command"
	MechanismSysrq   = "sysrq"
)

// Mechanisms lists the reboot mechanisms.
func Mechanisms() []string {
	return []string{MechanismNone, MechanismSystemd, MechanismCommand, MechanismSysrq}
}

// Rebooter reboots the host. Reboot returns once the reboot is under way
// (the process may not see it return at all).
type Rebooter interface {
	Mechanism() string
	Reboot(ctx context.Context) error
}

// RebootConfig is the operator's choice.
type RebootConfig struct {
	// Mechanism is one of Mechanisms.
	Mechanism string
	// Command is the argv of the command mechanism (run directly, no shell).
	Command []string
}

// NewRebooter builds the configured mechanism, or says why reboots are off.
// A mechanism that cannot work on this host (systemd on a host whose PID 1
// is not systemd) is an error, so that a misconfigured node says so at start
// rather than at its first repair.
func NewRebooter(hostRoot string, cfg RebootConfig, run command.Runner) (Rebooter, error) {
	switch cfg.Mechanism {
	case "", MechanismNone:
		return nil, nil
	case MechanismSystemd:
		if !SystemdBooted(hostRoot) {
			return nil, fmt.Errorf("reboot mechanism systemd: the host's PID 1 is not systemd (no %s)", filepath.Join(hostRoot, "run/systemd/system"))
		}
		return systemdRebooter{socket: filepath.Join(hostRoot, "run/systemd/private")}, nil
	case MechanismCommand:
		if len(cfg.Command) == 0 || cfg.Command[0] == "" {
			return nil, errors.New("reboot mechanism command: no command given")
		}
		return commandRebooter{argv: cfg.Command, run: run}, nil
	case MechanismSysrq:
		return sysrqRebooter{trigger: filepath.Join(hostRoot, "proc/sysrq-trigger")}, nil
	}
	return nil, fmt.Errorf("unknown reboot mechanism %q (known: %s)", cfg.Mechanism, strings.Join(Mechanisms(), ", "))
}

// SystemdBooted is sd_booted(3) under a host root: systemd creates
// /run/systemd/system at boot when it is PID 1.
func SystemdBooted(hostRoot string) bool {
	st, err := os.Stat(filepath.Join(hostRoot, "run/systemd/system"))
	return err == nil && st.IsDir()
}

// systemdRebooter asks the host's systemd to start reboot.target, as
// `systemctl reboot` does: an orderly shutdown (units stopped, file systems
// unmounted) on the host's own terms. It talks to systemd's private socket,
// which needs no bus daemon.
type systemdRebooter struct{ socket string }

func (systemdRebooter) Mechanism() string { return MechanismSystemd }

func (s systemdRebooter) Reboot(ctx context.Context) error {
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path="+s.socket, dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			_ = c.Close()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return fmt.Errorf("connecting to the host's systemd at %s: %w", s.socket, err)
	}
	defer conn.Close()
	if _, err := conn.StartUnitContext(ctx, "reboot.target", "replace-irreversibly", nil); err != nil {
		return fmt.Errorf("systemd refused reboot.target: %w", err)
	}
	return nil
}

// commandRebooter runs an operator's command: a site's own reboot tool, or
// in tests and the simulation a hook that gives a fake host a new boot.
type commandRebooter struct {
	argv []string
	run  command.Runner
}

func (commandRebooter) Mechanism() string { return MechanismCommand }

func (c commandRebooter) Reboot(ctx context.Context) error {
	return c.run.Run(ctx, c.argv[0], c.argv[1:], io.Discard)
}

// sysrqRebooter is the last resort for a host whose init cannot be asked:
// the kernel's magic SysRq "s" (sync), "u" (remount read-only), "b" (reboot
// at once). Only when configured explicitly: nothing is shut down cleanly.
type sysrqRebooter struct{ trigger string }

func (sysrqRebooter) Mechanism() string { return MechanismSysrq }

func (s sysrqRebooter) Reboot(context.Context) error {
	for _, k := range []string{"s", "u", "b"} {
		if err := os.WriteFile(s.trigger, []byte(k), 0); err != nil {
			return fmt.Errorf("writing %q to %s: %w", k, s.trigger, err)
		}
	}
	return nil
}
