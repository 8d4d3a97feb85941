package gateway

import (
	"regexp"
	"strings"
	"testing"
)

func TestMemberGenerateName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	for _, profile := range []string{"scripted", "claude.sonnet", "9lives", strings.Repeat("x", 253), "a_b", "---"} {
		name := memberGenerateName(profile) + "abcde"
		if !valid.MatchString(name) {
			t.Errorf("profile %q gives member name %q", profile, name)
		}
	}
	if got := delegationGenerateName("my_worker"); got != "my-worker-" {
		t.Errorf("delegation generateName = %q", got)
	}
}
