package gpucheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"nodemend.dev/nodemend/pkg/monitors/nvidia"
)

// SMIGPU is one line of
// `nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader`.
type SMIGPU struct {
	Index int
	UUID  string
	// PCI is normalized as nvidia.Device.PCI is (nvidia.NormalizePCI).
	PCI string
}

// IdentityQuery is the --query-gpu list ParseSMIGPUs reads.
const IdentityQuery = "index,uuid,pci.bus_id"

// ParseSMIGPUs reads nvidia-smi's identity query. A bus ID the agent's
// normalization cannot read is an error: the agent names GPUs by it.
func ParseSMIGPUs(out string) ([]SMIGPU, error) {
	var gpus []SMIGPU
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := splitCSV(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("nvidia-smi identity line %q: %d fields, want 3", line, len(f))
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi identity line %q: index: %v", line, err)
		}
		pci, ok := nvidia.NormalizePCI(f[2])
		if !ok {
			return nil, fmt.Errorf("nvidia-smi identity line %q: bus ID %q is not in a form the agent reads", line, f[2])
		}
		gpus = append(gpus, SMIGPU{Index: idx, UUID: f[1], PCI: pci})
	}
	return gpus, nil
}

func splitCSV(line string) []string {
	f := strings.Split(line, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// CompareDevices checks NVML's device list (nvmllib's Devices, as the agent
// reads it) against nvidia-smi's: the count, then each GPU's UUID and PCI
// address by index.
func CompareDevices(r *Report, nvml []nvidia.Device, smi []SMIGPU) {
	if len(nvml) == len(smi) {
		r.Add("device count", "node", Matched, "NVML and nvidia-smi: %d", len(nvml))
	} else {
		r.Add("device count", "node", Differed, "NVML %d, nvidia-smi %d", len(nvml), len(smi))
	}
	bySMI := map[int]SMIGPU{}
	for _, g := range smi {
		bySMI[g.Index] = g
	}
	for _, d := range nvml {
		subject := fmt.Sprintf("GPU %d", d.Index)
		s, ok := bySMI[d.Index]
		switch {
		case !ok:
			r.Add("device identity", subject, Differed, "NVML sees %s %s; nvidia-smi has no GPU %d", d.UUID, d.PCI, d.Index)
		case s.UUID != d.UUID || s.PCI != d.PCI:
			r.Add("device identity", subject, Differed, "NVML %s %s, nvidia-smi %s %s", d.UUID, d.PCI, s.UUID, s.PCI)
		case d.Minor < 0:
			r.Add("device identity", subject, Differed, "%s %s, but NVML gave no minor number (/dev/nvidiaN)", d.UUID, d.PCI)
		default:
			r.Add("device identity", subject, Matched, "%s %s /dev/nvidia%d", d.UUID, d.PCI, d.Minor)
		}
	}
}

// Kind says how nvidia-smi writes a field.
type Kind int

const (
	// Count is a decimal number.
	Count Kind = iota
	// Flag is "Yes" or "No".
	Flag
	// Mask is a hexadecimal bitmask ("0x0000000000000004").
	Mask
)

// FieldPair is an NVML field the agent reads and the --query-gpu field
// nvidia-smi answers the same question with.
type FieldPair struct {
	Check string
	SMI   string
	Kind  Kind
	// Read picks the agent's value out of a sample.
	Read func(nvidia.Sample) nvidia.Value
}

func field(id uint32) func(nvidia.Sample) nvidia.Value {
	return func(s nvidia.Sample) nvidia.Value { return s.Field(id) }
}

// FieldPairs are the fields compared: ECC, retired pages and row remapping
// (what the agent's memory checks read), and the clocks event reasons (its
// thermal and power checks).
func FieldPairs() []FieldPair {
	return []FieldPair{
		{"ECC uncorrected (volatile)", "ecc.errors.uncorrected.volatile.total", Count, field(nvidia.FieldECCDBEVolatileTotal)},
		{"retired pages pending", "retired_pages.pending", Flag, field(nvidia.FieldRetiredPending)},
		{"remapped rows pending", "remapped_rows.pending", Flag, field(nvidia.FieldRemappedPending)},
		{"remapped rows failure", "remapped_rows.failure", Flag, field(nvidia.FieldRemappedFailure)},
		{"clocks event reasons (thermal, power)", "clocks_event_reasons.active", Mask,
			func(s nvidia.Sample) nvidia.Value { return s.ClocksEventReasons }},
	}
}

// notAnswered is how nvidia-smi writes a value the GPU does not have.
var notAnswered = regexp.MustCompile(`^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions)\]?$`)

// ParseSMIValue reads one nvidia-smi value of kind k; ok is false for
// "[N/A]" and "[Not Supported]", err set for anything else unreadable.
func ParseSMIValue(s string, k Kind) (v uint64, ok bool, err error) {
	s = strings.TrimSpace(s)
	if notAnswered.MatchString(s) {
		return 0, false, nil
	}
	switch k {
	case Flag:
		switch strings.ToLower(s) {
		case "yes":
			return 1, true, nil
		case "no":
			return 0, true, nil
		}
	case Mask:
		if h, found := strings.CutPrefix(strings.ToLower(s), "0x"); found {
			v, err := strconv.ParseUint(h, 16, 64)
			return v, err == nil, err
		}
	case Count:
		v, err := strconv.ParseUint(s, 10, 64)
		return v, err == nil, err
	}
	return 0, false, fmt.Errorf("unreadable %q", s)
}

// CompareField judges one field of one GPU. smiOut is nvidia-smi's answer
// to --query-gpu=<p.SMI> --format=csv,noheader -i <index> (smiErr its
// failure, such as a field this driver does not know). Both sides "not
// there" is NotPresent; one side only, or different values, Differed.
// Counters and reasons move between the two reads: a rerun tells a moving
// value from a wrong one.
func CompareField(r *Report, subject string, p FieldPair, s nvidia.Sample, smiOut string, smiErr error) {
	nv := p.Read(s)
	var sv uint64
	var sok bool
	var perr error
	if smiErr != nil {
		perr = smiErr
	} else {
		sv, sok, perr = ParseSMIValue(firstLine(smiOut), p.Kind)
	}
	switch {
	case perr != nil && !nv.OK:
		r.Add(p.Check, subject, NotPresent, "NVML does not report it; nvidia-smi %s: %v", p.SMI, perr)
	case perr != nil:
		r.Add(p.Check, subject, Differed, "NVML %s; nvidia-smi %s: %v", show(nv.V, p.Kind), p.SMI, perr)
	case !nv.OK && !sok:
		r.Add(p.Check, subject, NotPresent, "neither NVML nor nvidia-smi reports it on this GPU")
	case nv.OK != sok:
		r.Add(p.Check, subject, Differed, "NVML %s, nvidia-smi %s", showValue(nv.V, nv.OK, p.Kind), showValue(sv, sok, p.Kind))
	case nv.V != sv:
		r.Add(p.Check, subject, Differed, "NVML %s, nvidia-smi %s", show(nv.V, p.Kind), show(sv, p.Kind))
	default:
		r.Add(p.Check, subject, Matched, "%s (NVML and nvidia-smi %s)", show(nv.V, p.Kind), p.SMI)
	}
}

func show(v uint64, k Kind) string {
	switch k {
	case Flag:
		if v != 0 {
			return "yes"
		}
		return "no"
	case Mask:
		return fmt.Sprintf("%#x", v)
	}
	return strconv.FormatUint(v, 10)
}

func showValue(v uint64, ok bool, k Kind) string {
	if !ok {
		return "not reported"
	}
	return show(v, k)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// ParseNVLinkStatus reads `nvidia-smi nvlink -s -i N`: one "Link k: <speed>"
// line per link, "<inactive>" for a link that is down.
func ParseNVLinkStatus(out string) []nvidia.LinkState {
	var links []nvidia.LinkState
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "Link ")
		if !ok {
			continue
		}
		_, state, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if strings.Contains(strings.ToLower(state), "inactive") {
			links = append(links, nvidia.LinkDown)
		} else {
			links = append(links, nvidia.LinkUp)
		}
	}
	return links
}

// CompareNVLink judges the NVLink states the agent read against nvidia-smi's.
func CompareNVLink(r *Report, subject string, s nvidia.Sample, smiOut string) {
	smi := ParseNVLinkStatus(smiOut)
	var nv []nvidia.LinkState
	for _, l := range s.NVLinks {
		if l != nvidia.LinkUnsupported {
			nv = append(nv, l)
		}
	}
	switch {
	case len(nv) == 0 && len(smi) == 0:
		r.Add("NVLink", subject, NotPresent, "no NVLink on this GPU")
	case slices.Equal(nv, smi):
		r.Add("NVLink", subject, Matched, "%d links, %d up", len(nv), countUp(nv))
	default:
		r.Add("NVLink", subject, Differed, "NVML %d links (%d up), nvidia-smi %d links (%d up)", len(nv), countUp(nv), len(smi), countUp(smi))
	}
}

func countUp(ls []nvidia.LinkState) int {
	n := 0
	for _, l := range ls {
		if l == nvidia.LinkUp {
			n++
		}
	}
	return n
}

// SMIFabric is the "Fabric" section of `nvidia-smi -q`.
type SMIFabric struct {
	Present bool   // the section exists and its State is not N/A
	State   string // "Completed", "In Progress", "Not Started"
	Status  string // "Success" or an error
}

// ParseSMIFabric finds the Fabric section of nvidia-smi -q.
func ParseSMIFabric(out string) SMIFabric {
	var f SMIFabric
	in := false
	indent := 0
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		lead := len(line) - len(strings.TrimLeft(line, " \t"))
		if trimmed == "Fabric" {
			in, indent = true, lead
			continue
		}
		if !in {
			continue
		}
		if trimmed == "" || lead <= indent {
			break
		}
		k, v, ok := strings.Cut(trimmed, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "State":
			f.State = strings.TrimSpace(v)
		case "Status":
			f.Status = strings.TrimSpace(v)
		}
	}
	f.Present = f.State != "" && !notAnswered.MatchString(f.State)
	return f
}

// fabricStates are nvidia-smi's words for NVML's fabric probe states.
var fabricStates = map[string]uint8{
	"Not Started": nvidia.FabricStateNotStarted,
	"In Progress": nvidia.FabricStateInProgress,
	"Completed":   nvidia.FabricStateCompleted,
}

// CompareFabric judges the fabric state the agent read (NVSwitch and
// multi-node NVLink systems) against nvidia-smi -q's.
func CompareFabric(r *Report, subject string, s nvidia.Sample, smiQ string) {
	smi := ParseSMIFabric(smiQ)
	nv := s.Fabric
	switch {
	case !nv.Supported && !smi.Present:
		r.Add("fabric state", subject, NotPresent, "no GPU fabric (no NVSwitch or multi-node NVLink)")
	case nv.Supported != smi.Present:
		r.Add("fabric state", subject, Differed, "NVML supported=%v, nvidia-smi state %q", nv.Supported, smi.State)
	case fabricStates[smi.State] != nv.State:
		r.Add("fabric state", subject, Differed, "NVML state %d, nvidia-smi %q", nv.State, smi.State)
	case nv.State == nvidia.FabricStateCompleted && (nv.Status == 0) != strings.EqualFold(smi.Status, "Success"):
		r.Add("fabric state", subject, Differed, "NVML status %d, nvidia-smi %q", nv.Status, smi.Status)
	default:
		r.Add("fabric state", subject, Matched, "%s, %s (health summary %d)", smi.State, smi.Status, nv.HealthSummary)
	}
}

// JSONShape is the set of key paths of a JSON document: "a.b[].c".
func JSONShape(data []byte) (map[string]bool, error) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	shape := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, c := range t {
				// Keys that are data, not structure (GPU ids, test names
				// as keys) are numbers or free text; dcgmi's are words.
				if !isWord(k) {
					k = "*"
				}
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				shape[p] = true
				walk(p, c)
			}
		case []any:
			for _, c := range t {
				walk(prefix+"[]", c)
			}
		}
	}
	walk("", v)
	return shape, nil
}

var word = regexp.MustCompile(`^[A-Za-z_][A-Za-z_ ]*$`)

func isWord(s string) bool { return word.MatchString(s) }

// NewKeys are the key paths of the real document that none of the
// fixtures has: structure the parsers were never tested on.
func NewKeys(real []byte, fixtures ...[]byte) ([]string, error) {
	got, err := JSONShape(real)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, f := range fixtures {
		s, err := JSONShape(f)
		if err != nil {
			return nil, fmt.Errorf("fixture: %w", err)
		}
		for k := range s {
			known[k] = true
		}
	}
	var extra []string
	for k := range got {
		if !known[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	return extra, nil
}
