package deploytest

import "testing"

// Must returns a function that fails the test on an error, for one-line
// calls: Must[*corev1.Pod](t)(client.Create(...)).
func Must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
