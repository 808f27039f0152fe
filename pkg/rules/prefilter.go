package rules

// prefilter finds in one pass over a line which rules' anchor literals occur
// in it. It is an Aho–Corasick automaton over the anchors, compiled to a dense
// DFA whose columns are byte classes (the bytes that occur in some anchor, and
// one class for all others), so that each byte of the line costs one table
// look-up whatever the number of rules.
type prefilter struct {
	class [256]uint16 // byte → column; 0 for bytes in no anchor
	ncols int
	// delta[row+column] is the row of the next state, where a state's row is
	// state*ncols; ^row when that state has outputs.
	delta  []int32
	output [][]int32 // state → indices of the anchors that end at it
}

func newPrefilter(anchors []string) *prefilter {
	p := &prefilter{ncols: 1}
	for _, a := range anchors {
		for i := 0; i < len(a); i++ {
			if p.class[a[i]] == 0 {
				p.class[a[i]] = uint16(p.ncols)
				p.ncols++
			}
		}
	}

	// The trie of the anchors; -1 is no edge. State 0 is the root. It is built
	// one depth at a time so that states are numbered breadth first: the
	// shallow states, where scanning spends most of its time, share a few
	// cache lines.
	newState := func() int32 {
		for range p.ncols {
			p.delta = append(p.delta, -1)
		}
		p.output = append(p.output, nil)
		return int32(len(p.output) - 1)
	}
	newState()
	at := make([]int32, len(anchors)) // the state of each anchor's prefix so far
	for depth, more := 0, true; more; depth++ {
		more = false
		for i, a := range anchors {
			if depth >= len(a) {
				continue
			}
			more = true
			k := int(at[i])*p.ncols + int(p.class[a[depth]])
			if p.delta[k] < 0 {
				t := newState() // before indexing: it may move p.delta
				p.delta[k] = t
			}
			at[i] = p.delta[k]
			if depth == len(a)-1 {
				p.output[at[i]] = append(p.output[at[i]], int32(i))
			}
		}
	}

	// Breadth first, complete each state's row with its failure state's
	// (the longest proper suffix of its path that is a trie path), and inherit
	// that state's outputs.
	fail := make([]int32, len(p.output))
	var queue []int32
	for c := range p.ncols {
		if t := p.delta[c]; t < 0 {
			p.delta[c] = 0
		} else {
			queue = append(queue, t) // fail[t] = 0
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		p.output[s] = append(p.output[s], p.output[fail[s]]...)
		row, frow := int(s)*p.ncols, int(fail[s])*p.ncols
		for c := range p.ncols {
			if t := p.delta[row+c]; t < 0 {
				p.delta[row+c] = p.delta[frow+c]
			} else {
				fail[t] = p.delta[frow+c]
				queue = append(queue, t)
			}
		}
	}

	// Turn states into rows, and flag the transitions into states with
	// outputs so that scan looks at outputs only there.
	for k, t := range p.delta {
		p.delta[k] = t * int32(p.ncols)
		if len(p.output[t]) > 0 {
			p.delta[k] = ^p.delta[k]
		}
	}
	return p
}

// scan sets bit i of hits for each anchor i that occurs in text, and reports
// whether any does. hits must be zeroed and have a bit for every anchor.
func (p *prefilter) scan(text string, hits []uint64) bool {
	delta, class := p.delta, &p.class
	found := false
	row := int32(0)
	for i := 0; i < len(text); i++ {
		row = delta[row+int32(class[text[i]])]
		if row < 0 {
			row = ^row
			for _, a := range p.output[int(row)/p.ncols] {
				hits[a/64] |= 1 << (a % 64)
			}
			found = true
		}
	}
	return found
}
