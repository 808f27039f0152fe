package networking

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodemend.dev/nodemend/pkg/detection"
	"nodemend.dev/nodemend/pkg/health"
)

// --- MACAddressPolicyMisconfigured ---------------------------------------------
//
// udev applies a systemd .link file to every new network interface. With
// MACAddressPolicy=persistent it replaces a randomly assigned MAC address by
// one derived from the interface name (systemd.link(5)). The VPC CNI before
// v1.20.1 created the host end of a pod's veth with a random address and
// pinned the pod's gateway ARP entry to it; when udev rewrote the address
// afterwards the pod lost its network. Since v1.20.1 the plugin sets the
// address itself, and udev leaves addresses set by user space alone.

// vpcCNIFixedMAC is the first VPC CNI release that assigns the host veth's
// MAC address (aws/amazon-vpc-cni-k8s#3354).
var vpcCNIFixedMAC = [3]int{1, 20, 1}

// linkSearchDirs are systemd.link's directories, highest precedence first:
// a file in an earlier directory hides one of the same name in a later one.
var linkSearchDirs = []string{"etc/systemd/network", "run/systemd/network", "usr/local/lib/systemd/network", "usr/lib/systemd/network", "lib/systemd/network"}

// maxLinkFile bounds the read of one .link file or drop-in.
const maxLinkFile = 64 << 10

// udevLink is what udev recorded of one interface (/run/udev/data/n<ifindex>).
type udevLink struct {
	Name, Driver string
	// LinkFile is ID_NET_LINK_FILE, the .link file udev applied; DropIns
	// ID_NET_LINK_FILE_DROPINS (systemd 254+), colon separated.
	LinkFile string
	DropIns  []string
}

// macPolicyInput is what the check gathers.
type macPolicyInput struct {
	// CNIVersion is the VPC CNI's version from its pod's image, zero when
	// the VPC CNI is not installed or its version is unknown.
	CNIVersion [3]int
	CNIImage   string
	// Policies maps each applied link file to its effective
	// MACAddressPolicy and the veths it was applied to.
	Policies map[string]linkPolicy
}

type linkPolicy struct {
	Policy string
	Veths  []string
}

func (m *Monitor) runMACPolicy(ctx context.Context) ([]detection.Finding, error) {
	in, err := gather(ctx, m, &m.macGuard, "udev database and .link files", m.readMACPolicy)
	if err != nil {
		return nil, err
	}
	return evalMACPolicy(in, m.env.Clock.Now()), nil
}

func (m *Monitor) readMACPolicy() (macPolicyInput, error) {
	var in macPolicyInput
	confs, err := cniConfigs(m.hostPath(cniConfDir))
	if err != nil || !slices.Contains(confs, vpcCNIConfig) || m.opts.Pods == nil {
		return in, err
	}
	pods, err := m.opts.Pods()
	if err != nil {
		return in, err
	}
	in.CNIImage, in.CNIVersion = vpcCNIVersion(pods)
	if in.CNIVersion == ([3]int{}) || !versionBefore(in.CNIVersion, vpcCNIFixedMAC) {
		return in, nil // fixed, or unknown: nothing to hold against the node
	}
	links, err := m.udevLinks()
	if err != nil {
		return in, err
	}
	in.Policies = map[string]linkPolicy{}
	for _, l := range links {
		if l.Driver != "veth" || l.LinkFile == "" {
			continue
		}
		lp, ok := in.Policies[l.LinkFile]
		if !ok {
			lp.Policy, err = m.effectivePolicy(l)
			if err != nil {
				return in, err
			}
		}
		lp.Veths = append(lp.Veths, l.Name)
		in.Policies[l.LinkFile] = lp
	}
	return in, nil
}

// udevLinks reads udev's record of every interface of sysfs.
func (m *Monitor) udevLinks() ([]udevLink, error) {
	dir := m.hostPath("sys/class/net")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []udevLink
	for _, e := range ents {
		idx, err := os.ReadFile(filepath.Join(dir, e.Name(), "ifindex"))
		if err != nil {
			continue // gone meanwhile
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(idx)))
		if err != nil {
			continue
		}
		data, err := readBounded(m.hostPath(fmt.Sprintf("run/udev/data/n%d", n)), maxLinkFile)
		if errors.Is(err, os.ErrNotExist) {
			continue // udev has not processed it (yet), or no udev
		}
		if err != nil {
			return nil, err
		}
		l := parseUdevData(data)
		l.Name = e.Name()
		out = append(out, l)
	}
	return out, nil
}

// parseUdevData reads the properties (E: lines) of a udev database entry.
func parseUdevData(data []byte) udevLink {
	var l udevLink
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		kv, ok := strings.CutPrefix(sc.Text(), "E:")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "ID_NET_DRIVER":
			l.Driver = v
		case "ID_NET_LINK_FILE":
			l.LinkFile = v
		case "ID_NET_LINK_FILE_DROPINS":
			for _, d := range strings.Split(v, ":") {
				if d != "" {
					l.DropIns = append(l.DropIns, d)
				}
			}
		}
	}
	return l
}

// effectivePolicy is the MACAddressPolicy udev applied from a link file and
// its drop-ins: "<name>.d/*.conf" in every search directory, a drop-in of
// one name taken from the directory of highest precedence, applied in name
// order after the file (systemd.unit(5), "drop-in"); the last assignment wins.
func (m *Monitor) effectivePolicy(l udevLink) (string, error) {
	main, err := readBounded(m.hostPath(l.LinkFile), maxLinkFile)
	if err != nil {
		return "", fmt.Errorf("link file %s: %w", l.LinkFile, err)
	}
	dropins := map[string]string{} // name -> host path
	for i := len(linkSearchDirs) - 1; i >= 0; i-- {
		d := filepath.Join("/", linkSearchDirs[i], filepath.Base(l.LinkFile)+".d")
		ents, err := os.ReadDir(m.hostPath(d))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".conf") {
				dropins[e.Name()] = filepath.Join(d, e.Name())
			}
		}
	}
	for _, d := range l.DropIns {
		if _, ok := dropins[filepath.Base(d)]; !ok {
			dropins[filepath.Base(d)] = d
		}
	}
	names := make([]string, 0, len(dropins))
	for n := range dropins {
		names = append(names, n)
	}
	sort.Strings(names)
	files := [][]byte{main}
	for _, n := range names {
		b, err := readBounded(m.hostPath(dropins[n]), maxLinkFile)
		if err != nil {
			return "", fmt.Errorf("link file drop-in %s: %w", dropins[n], err)
		}
		files = append(files, b)
	}
	return macAddressPolicy(files...), nil
}

// macAddressPolicy returns the last MACAddressPolicy= of the [Link]
// sections of files, in order; "" when none sets it or the last assignment
// is empty (which resets it: systemd.link(5)).
func macAddressPolicy(files ...[]byte) string {
	policy := ""
	for _, f := range files {
		section := ""
		sc := bufio.NewScanner(bytes.NewReader(f))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case line == "" || line[0] == '#' || line[0] == ';':
			case line[0] == '[' && strings.HasSuffix(line, "]"):
				section = line[1 : len(line)-1]
			case section == "Link":
				k, v, ok := strings.Cut(line, "=")
				if ok && strings.TrimSpace(k) == "MACAddressPolicy" {
					policy = strings.TrimSpace(v)
				}
			}
		}
	}
	return policy
}

// vpcCNIVersion finds this node's aws-node pod and the version of its
// aws-node container's image (".../amazon-k8s-cni:v1.19.2-eksbuild.1").
func vpcCNIVersion(pods []*corev1.Pod) (string, [3]int) {
	for _, p := range pods {
		if p.Namespace != "kube-system" || !strings.HasPrefix(p.Name, "aws-node-") {
			continue
		}
		for _, c := range p.Spec.Containers {
			if c.Name != "aws-node" {
				continue
			}
			img, _, _ := strings.Cut(c.Image, "@")
			i := strings.LastIndexByte(img, ':')
			if i < 0 || strings.Contains(img[i:], "/") {
				return c.Image, [3]int{}
			}
			return c.Image, parseVersion(img[i+1:])
		}
	}
	return "", [3]int{}
}

// parseVersion reads "v1.19.2-eksbuild.1" as 1.19.2; zero when it is not
// such a version.
func parseVersion(tag string) [3]int {
	tag = strings.TrimPrefix(tag, "v")
	tag, _, _ = strings.Cut(tag, "-")
	parts := strings.Split(tag, ".")
	if len(parts) != 3 {
		return [3]int{}
	}
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return [3]int{}
		}
		v[i] = n
	}
	return v
}

func versionBefore(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// evalMACPolicy reports each link file applied to pod veths whose
// effective MACAddressPolicy is persistent, on a VPC CNI that needs it to
// be none.
func evalMACPolicy(in macPolicyInput, now time.Time) []detection.Finding {
	var files []string
	for f, lp := range in.Policies {
		if lp.Policy == "persistent" {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	var fs []detection.Finding
	for _, f := range files {
		veths := in.Policies[f].Veths
		sort.Strings(veths)
		example := veths[0]
		fs = append(fs, detection.Finding{
			Reason: health.ReasonMACAddressPolicyMisconfigured,
			Message: fmt.Sprintf("%s sets MACAddressPolicy=persistent and udev applied it to %d pod veths (%s, ...) on a VPC CNI older than v1.20.1 (%s): "+
				"udev may change a pod's host veth MAC after the CNI pinned the pod's gateway to it; set MACAddressPolicy=none for veths "+
				"(a .link file matching Driver=veth) or upgrade the VPC CNI", f, len(veths), example, in.CNIImage),
			Observed: now,
			Subject:  f,
		})
	}
	return fs
}
