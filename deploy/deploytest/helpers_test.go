package deploytest

import (
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
)

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// verdicts returns checks of a write's outcome: refused fails t unless err
// is Forbidden and says want (or one of want's " | "-separated
// alternatives, where two policies refuse the same write and either may
// answer first); allowed fails t on any error.
func verdicts(t *testing.T) (refused func(name string, err error, want string), allowed func(name string, err error)) {
	refused = func(name string, err error, want string) {
		t.Helper()
		if err == nil || !apierrors.IsForbidden(err) || !saysOneOf(err.Error(), want) {
			t.Errorf("%s: %v, want refused with %q", name, err, want)
		}
	}
	allowed = func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	return refused, allowed
}

func saysOneOf(msg, wants string) bool {
	for _, w := range strings.Split(wants, " | ") {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}
