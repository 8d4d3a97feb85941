package detect

// Match is one rule whose conditions hold on a screen.
type Match struct {
	// Rule is the rule's id.
	Rule string
	// State is the state the rule decides.
	State State
	// Priority is the rule's priority: the highest decides.
	Priority int
	// Region is the rule's region, as the manifest names it.
	Region string
}

// Explanation is why a screen says what it says: every rule that matched,
// in manifest order, and the verdict they came to.
type Explanation struct {
	Verdict
	Matches []Match
}

// Explain evaluates every rule against the screen, as Detect does, and
// keeps every rule that matched, not only the one that decided.
func (d *Detector) Explain(s Screen) Explanation {
	e := Explanation{Verdict: d.Detect(s)}
	for i := range d.rules {
		r := &d.rules[i]
		text := r.region.of(s)
		if r.gate.matches(text, splitLines(text)) {
			region := r.Region
			if region == "" {
				region = "whole_recent"
			}
			e.Matches = append(e.Matches, Match{Rule: r.ID, State: r.State, Priority: r.Priority, Region: region})
		}
	}
	return e
}
