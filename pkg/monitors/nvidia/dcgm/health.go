package dcgm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Grade is a health watch result (dcgm_structs.h dcgmHealthWatchResults_t)
// as dcgmi prints it (dcgmi/Health.cpp HelperHealthToString).
type Grade int

const (
	Healthy Grade = iota // DCGM_HEALTH_RESULT_PASS, "Healthy"
	Warn                 // DCGM_HEALTH_RESULT_WARN, "Warning"
	Fail                 // DCGM_HEALTH_RESULT_FAIL, "Failure"
)

func (g Grade) String() string {
	switch g {
	case Healthy:
		return "Healthy"
	case Warn:
		return "Warning"
	case Fail:
		return "Failure"
	}
	return "Grade(" + strconv.Itoa(int(g)) + ")"
}

func parseGrade(s string) (Grade, error) {
	switch s {
	case "Healthy":
		return Healthy, nil
	case "Warning":
		return Warn, nil
	case "Failure":
		return Fail, nil
	}
	return 0, fmt.Errorf("unknown health result %q", s)
}

// Entity is a DCGM entity: its group as dcgmi names it (DcgmFieldsGetEntityGroupString:
// "GPU", "Switch", "CPU", "ConnectX", "None", ...) and its DCGM id.
type Entity struct {
	Group string
	ID    string
}

// Subject is how findings name the entity: "GPU 0". System-wide incidents
// (group "None", e.g. the IMEX daemon) have no subject.
func (e Entity) Subject() string {
	if e.Group == "None" || e.Group == "" {
		return ""
	}
	return e.Group + " " + e.ID
}

// Incident is one problem a health check reported.
type Incident struct {
	Entity Entity
	// System is the watched system as dcgmi labels it ("PCIe system",
	// "Memory system", ...). dcgmi labels the incidents of every system it
	// has no name for (XIDs that concern all systems, NvSwitch errors)
	// "Internal error".
	System string
	// Grade is what DCGM reported for the system: the worst grade of its
	// incidents on this entity.
	Grade Grade
	// Code is recovered from the message; CodeUnknown when no DCGM 4.6
	// message format matches (a newer DCGM).
	Code Code
	// Recognized is false when Code is CodeUnknown because nothing matched.
	Recognized bool
	// Message is DCGM's text for this incident.
	Message string
	// XID is the XID that triggered the incident, when the message names one.
	XID int
}

// HealthReport is one `dcgmi health --check --json`.
type HealthReport struct {
	// Overall is DCGM's overall health of the watched GPUs.
	Overall   Grade
	Incidents []Incident
}

// dcgmiNode is a node of dcgmi's JSON output (dcgmi/DcgmiOutput.cpp): a value,
// continuation lines, and named children.
type dcgmiNode struct {
	Value    *string              `json:"value"`
	Overflow []string             `json:"overflow"`
	Children map[string]dcgmiNode `json:"children"`
}

type dcgmiDocument struct {
	Body   map[string]dcgmiNode `json:"body"`
	Header []string             `json:"header"`
}

const overallHealthKey = "Overall Health"

// maxIncidents bounds what one report may hold (DCGM itself returns at most
// 64 incidents per check); a larger document is not a real report.
const maxIncidents = 4096

// ParseHealth reads the output of `dcgmi health --check --json`. The
// document (dcgmi/Health.cpp GenerateOutputFromResponse) is
//
//	body."Overall Health".value                         Healthy | Warning | Failure
//	body.<entity group>.children.<id>.value              the entity's worst grade
//	body.<group>.children.<id>.children.Errors.children.<system>
//	    .value                                           the system's worst grade
//	    .overflow                                        its messages, ", "-joined and wrapped
//
// Anything dcgmi printed before the JSON document is ignored.
func ParseHealth(out []byte) (HealthReport, error) {
	start := bytes.IndexByte(out, '{')
	if start < 0 {
		return HealthReport{}, errors.New("no JSON document in the output of dcgmi health")
	}
	var doc dcgmiDocument
	dec := json.NewDecoder(bytes.NewReader(out[start:]))
	if err := dec.Decode(&doc); err != nil {
		return HealthReport{}, fmt.Errorf("dcgmi health output: %w", err)
	}
	overall, ok := doc.Body[overallHealthKey]
	if !ok || overall.Value == nil {
		return HealthReport{}, errors.New("dcgmi health output has no \"Overall Health\"")
	}
	var r HealthReport
	var err error
	if r.Overall, err = parseGrade(*overall.Value); err != nil {
		return HealthReport{}, fmt.Errorf("Overall Health: %w", err)
	}
	groups := sortedKeys(doc.Body)
	for _, group := range groups {
		if group == overallHealthKey {
			continue
		}
		for _, id := range sortedKeys(doc.Body[group].Children) {
			entity := Entity{Group: group, ID: id}
			errs := doc.Body[group].Children[id].Children["Errors"]
			for _, system := range sortedKeys(errs.Children) {
				node := errs.Children[system]
				if node.Value == nil {
					return HealthReport{}, fmt.Errorf("%s %s %s: no health result", group, id, system)
				}
				g, err := parseGrade(*node.Value)
				if err != nil {
					return HealthReport{}, fmt.Errorf("%s %s %s: %w", group, id, system, err)
				}
				if g == Healthy {
					continue
				}
				for _, inc := range splitIncidents(strings.Join(node.Overflow, " ")) {
					inc.Entity, inc.System, inc.Grade = entity, system, g
					r.Incidents = append(r.Incidents, inc)
					if len(r.Incidents) > maxIncidents {
						return HealthReport{}, fmt.Errorf("dcgmi health output has more than %d incidents", maxIncidents)
					}
				}
			}
		}
	}
	return r, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var (
	spaces     = regexp.MustCompile(`\s+`)
	xidMention = regexp.MustCompile(`(?:Detected XID|triggered by XID) ([0-9]+)`)
)

// splitIncidents cuts the text of one system into its incidents. dcgmi joins
// the messages of a system with ", " (dcgmi/Health.cpp AppendSystemIncidents)
// and each message is DCGM's formatted text followed by its suggested next
// steps (common/DcgmError.h SetFullError), so an incident starts wherever a
// known message format matches at the start of a word. Text before the first
// match, or a system whose text matches nothing, is one unrecognized
// incident.
func splitIncidents(text string) []Incident {
	text = strings.TrimSpace(spaces.ReplaceAllString(text, " "))
	if text == "" {
		return []Incident{{Code: CodeUnknown, Message: "(DCGM gave no message)"}}
	}
	type start struct {
		at   int
		code Code
	}
	var starts []start
	for i := 0; i < len(text); i++ {
		if i > 0 && text[i-1] != ' ' {
			continue
		}
		if afterXIDDetail(text[:i]) {
			// DCGM repeats the message of a mapped XID in its detail:
			// "... (triggered by XID 63: A pending retired page ...)".
			continue
		}
		if c, ok := recognize(text[i:]); ok {
			starts = append(starts, start{i, c})
		}
	}
	var out []Incident
	if len(starts) == 0 || starts[0].at > 0 {
		end := len(text)
		if len(starts) > 0 {
			end = starts[0].at
		}
		out = append(out, Incident{Code: CodeUnknown, Message: trimJoint(text[:end])})
	}
	for i, s := range starts {
		end := len(text)
		if i+1 < len(starts) {
			end = starts[i+1].at
		}
		out = append(out, Incident{Code: s.code, Recognized: true, Message: trimJoint(text[s.at:end])})
	}
	for i := range out {
		if m := xidMention.FindStringSubmatch(out[i].Message); m != nil {
			out[i].XID, _ = strconv.Atoi(m[1])
		}
	}
	return out
}

// afterXIDDetail reports whether prefix ends with "(triggered by XID N: ".
func afterXIDDetail(prefix string) bool {
	const lead = "(triggered by XID "
	if !strings.HasSuffix(prefix, ": ") {
		return false
	}
	digits := strings.TrimSuffix(prefix, ": ")
	j := len(digits)
	for j > 0 && digits[j-1] >= '0' && digits[j-1] <= '9' {
		j--
	}
	return j < len(digits) && strings.HasSuffix(digits[:j], lead)
}

// trimJoint drops the ", " that joined a message to the next one.
func trimJoint(s string) string {
	return strings.TrimRight(strings.TrimSpace(s), ", ")
}
