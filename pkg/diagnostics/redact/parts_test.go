package redact

// eachPart calls f with every whole part of name, lower-cased.
func eachPart(name []byte, f func(part []byte)) {
	var buf [128]byte
	var parts [maxParts + 1][2]int
	np := splitParts(name, &buf, &parts)
	for k := 0; k < np; k++ {
		f(buf[parts[k][0]:parts[k][1]])
	}
}
