package dcgm

// HealthCodes lists the codes a health check can report, including
// CodeUnknown for a message nodemend does not recognize.
func HealthCodes() []Code {
	out := []Code{CodeUnknown}
	for _, h := range healthCodes {
		out = append(out, h.code)
	}
	return out
}
